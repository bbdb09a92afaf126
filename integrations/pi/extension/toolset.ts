/**
 * The Pi tools a limited workflow step has: turning on, for the step, the tools its
 * `allowed_tools` names that this Pi has but the session has not activated (a default Pi has
 * `grep`, `find` and `ls` but activates only `read`, `bash`, `edit` and `write`), and turning
 * them off again once the step's limit is no longer in force.
 *
 * Owns the session's record of that: a custom entry `pi-workflows-tools` (never sent to the
 * model) written *before* tools are turned on (`{action: "activate", requestId, added}`) and
 * after they are turned off (`{action: "restore", requestId, removed}`). Pi records the active
 * tools in the session's transcript at its next model request and brings them back when the
 * session is opened again, so a Pi killed (or ended) while a step's tools were on would leave
 * them on; `outstanding` reads from the branch which tools this extension turned on and may
 * still be on, and the next `sync` turns them off unless that step is still in force. Only
 * tools this module turned on are ever turned off, and it never turns a tool off that the
 * session had before (the limit itself is enforced by the `tool_call` hook, `toollimit.ts`).
 *
 * Never contacts the server. The pure functions have no value imports (Node can strip and
 * run this file by itself); `StepToolset` calls only the Pi API it is given.
 */

/** The `customType` of the entries that record which tools a step turned on and off. */
export const TOOLS_ENTRY_TYPE = "pi-workflows-tools";

/** What one record says: tools turned on for a step, or turned off after it. */
export interface ToolsRecord {
	action: "activate" | "restore";
	requestId: string;
	/** `activate`: the tools turned on (every tool on for the step so far). */
	added?: string[];
	/** `restore`: the tools turned off. */
	removed?: string[];
}

/** Tools this extension turned on for the step `requestId` that may still be on. */
export interface Activation {
	requestId: string;
	added: string[];
}

/** The part of Pi's extension API this module uses (`ExtensionAPI` has all of it). */
export interface ToolsApi {
	getActiveTools(): string[];
	getAllTools(): { name: string; exposure?: string }[];
	setActiveTools(toolNames: string[]): void;
	appendEntry(customType: string, data?: unknown): void;
}

/** A session entry as this module reads it. */
interface EntryLike {
	type?: unknown;
	customType?: unknown;
	data?: unknown;
	message?: { role?: unknown; toolsAdded?: unknown; toolsRemoved?: unknown };
}

function names(value: unknown): string[] {
	return Array.isArray(value) ? value.filter((name): name is string => typeof name === "string" && name !== "") : [];
}

/** The record `entry` holds, if it is one of ours. */
export function recordOf(entry: unknown): ToolsRecord | undefined {
	const item = (entry ?? {}) as EntryLike;
	if (item.type !== "custom" || item.customType !== TOOLS_ENTRY_TYPE) return undefined;
	const data = item.data as Partial<ToolsRecord> | undefined;
	if (!data || typeof data !== "object" || typeof data.requestId !== "string") return undefined;
	if (data.action === "activate") return { action: "activate", requestId: data.requestId, added: names(data.added) };
	if (data.action === "restore") return { action: "restore", requestId: data.requestId, removed: names(data.removed) };
	return undefined;
}

/** The tool names a Pi system message (the transcript's tool loadout) adds and removes. */
function loadoutChange(entry: unknown): { added: string[]; removed: string[] } | undefined {
	const item = (entry ?? {}) as EntryLike;
	if (item.type !== "message" || !item.message || item.message.role !== "system") return undefined;
	const named = (list: unknown) =>
		Array.isArray(list) ? list.map((tool) => (tool as { name?: unknown })?.name).filter((n): n is string => typeof n === "string") : [];
	return { added: named(item.message.toolsAdded), removed: named(item.message.toolsRemoved) };
}

/**
 * The tools of `branch`'s latest record that may still be on: all those an `activate` record
 * turned on (the step's end was never recorded: Pi was killed, or the session ended before),
 * or those a `restore` record turned off that the transcript's loadout still holds because no
 * model request recorded the change since (Pi turns them on again when it opens the session).
 */
export function outstanding(branch: readonly unknown[]): Activation | undefined {
	let last = -1;
	let record: ToolsRecord | undefined;
	for (let index = branch.length - 1; index >= 0 && !record; index--) {
		record = recordOf(branch[index]);
		if (record) last = index;
	}
	if (!record) return undefined;
	if (record.action === "activate") {
		return (record.added ?? []).length > 0 ? { requestId: record.requestId, added: record.added ?? [] } : undefined;
	}
	const loadout = new Set<string>();
	const changedAfter = new Set<string>();
	branch.forEach((entry, index) => {
		const change = loadoutChange(entry);
		if (!change) return;
		for (const name of change.removed) loadout.delete(name);
		for (const name of change.added) loadout.add(name);
		if (index > last) for (const name of [...change.added, ...change.removed]) changedAfter.add(name);
	});
	const stale = (record.removed ?? []).filter((name) => loadout.has(name) && !changedAfter.has(name));
	return stale.length > 0 ? { requestId: record.requestId, added: stale } : undefined;
}

/**
 * What to turn on for a limit of `tools`: those not `active` that Pi has and can turn on
 * (`available`: the names of `getAllTools()` whose exposure is not `hidden`).
 */
export function toTurnOn(tools: readonly string[], active: ReadonlySet<string>, available: ReadonlySet<string>): string[] {
	return [...new Set(tools)].filter((name) => !active.has(name) && available.has(name));
}

/** The step's limit in force: its request and the tools it allows besides `workflow`. */
export interface LimitInForce {
	requestId: string;
	tools: readonly string[];
}

/**
 * The tools turned on for the limit in force, for one Pi session: `sync` makes the active
 * tools follow the limit (on for it, off once it ends), `restore` turns them off when the
 * session ends. Every Pi call is guarded by the caller (a stale session throws).
 */
export class StepToolset {
	private readonly pi: ToolsApi;
	private current: Activation | undefined;

	constructor(pi: ToolsApi) {
		this.pi = pi;
	}

	/** `session_start`: take over what the branch says this extension turned on and may still be on. */
	adopt(branch: readonly unknown[]): void {
		this.current = outstanding(branch);
	}

	/** The tools turned on now, and for which step (for tests and the status). */
	get activation(): Activation | undefined {
		return this.current;
	}

	/**
	 * Follow `limit` (undefined: no limit in force): turn off what was turned on for another
	 * step, then turn on the limit's tools that are off and can be on. Returns the limit's tools
	 * that are still not active afterwards (Pi lacks them, or would not turn them on).
	 */
	sync(limit: LimitInForce | undefined): string[] {
		if (this.current && this.current.requestId !== limit?.requestId) this.restore();
		if (!limit) return [];
		const active = new Set(this.pi.getActiveTools());
		const available = new Set(
			this.pi
				.getAllTools()
				.filter((tool) => tool.exposure !== "hidden")
				.map((tool) => tool.name),
		);
		const add = toTurnOn(limit.tools, active, available);
		if (add.length > 0) {
			const added = [...new Set([...(this.current?.added ?? []), ...add])];
			// Recorded first: a Pi killed right after turning them on still knows to turn them off.
			this.pi.appendEntry(TOOLS_ENTRY_TYPE, { action: "activate", requestId: limit.requestId, added });
			this.current = { requestId: limit.requestId, added };
			this.pi.setActiveTools([...active, ...add]);
		}
		const after = new Set(this.pi.getActiveTools());
		return limit.tools.filter((name) => !after.has(name));
	}

	/** Turn off the tools turned on for a step (those still on), and record it. */
	restore(): void {
		const current = this.current;
		if (!current) return;
		this.current = undefined;
		const added = new Set(current.added);
		const active = this.pi.getActiveTools();
		if (active.some((name) => added.has(name))) this.pi.setActiveTools(active.filter((name) => !added.has(name)));
		this.pi.appendEntry(TOOLS_ENTRY_TYPE, { action: "restore", requestId: current.requestId, removed: current.added });
	}
}
