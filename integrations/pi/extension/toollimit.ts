/**
 * The tool limit of a workflow step (`agent(..., allowed_tools=[...])`): reading it from what
 * the server sends, deciding whether this Pi can enforce it, and the words of a blocked call.
 *
 * Owns the rule, not the state: the coordinator decides *when* a limit is in force (from the
 * step's presentation until its request is no longer the session's active request) and Pi's
 * `tool_call` hook asks it; this module only answers pure questions. The `workflow` tool is
 * always allowed, so `allowed_tools=[]` leaves only it. Pure functions with no value imports
 * (Node can strip and run this file by itself); never contacts the server or touches Pi.
 */

/** The model-facing tool a step is submitted with; a tool limit always allows it. */
export const WORKFLOW_TOOL = "workflow";

/** The Pi major version from which the extension relies on the `tool_call` hook to block calls. */
export const MIN_PI_MAJOR = 1;

/** What a step allows: no limit, a limit (the tools besides `workflow`), or a limit we could not read. */
export type StepTools =
	| { kind: "none" }
	| { kind: "limit"; tools: string[] }
	| { kind: "unreadable"; reason: string };

/** The request kinds a tool limit applies to (a checkpoint or decision has none). */
const LIMITED_KINDS: ReadonlySet<string> = new Set(["agent", "assistant"]);

/** The longest list of tool names quoted in one message. */
const MAX_NAMES_SHOWN = 12;

/** True for the request kinds whose steps may carry a tool limit. */
export function mayBeLimited(requestKind: string | null | undefined): boolean {
	return typeof requestKind === "string" && LIMITED_KINDS.has(requestKind);
}

/**
 * The tool limit in `value`, the `allowedTools` of a stored agent request: `null` is no limit,
 * a list of tool names is a limit, anything else (also a missing field: `undefined`) cannot be
 * read, and the caller must not present the step unguarded.
 */
export function parseAllowedTools(value: unknown): StepTools {
	if (value === null) return { kind: "none" };
	if (value === undefined) return { kind: "unreadable", reason: "the step's request does not say which tools it allows" };
	if (!Array.isArray(value) || !value.every((name) => typeof name === "string" && name.trim() !== "")) {
		return { kind: "unreadable", reason: "the step's allowedTools is not a list of tool names" };
	}
	const tools = [...new Set(value as string[])].filter((name) => name !== WORKFLOW_TOOL);
	return { kind: "limit", tools };
}

/** The `allowedTools` field of `holder` when it is an object that has one, else `undefined`. */
export function allowedToolsField(holder: unknown): unknown {
	if (!holder || typeof holder !== "object" || Array.isArray(holder)) return undefined;
	return "allowedTools" in holder ? (holder as { allowedTools: unknown }).allowedTools : undefined;
}

/** True when this Pi's version (`VERSION` of `@earendil-works/pi-coding-agent`) has the hook we block with. */
export function piCanBlockTools(version: unknown): boolean {
	if (typeof version !== "string") return false;
	const major = Number.parseInt(version.split(".")[0] ?? "", 10);
	return Number.isFinite(major) && major >= MIN_PI_MAJOR;
}

/**
 * Why this Pi cannot enforce `tools` (undefined when it can): a Pi without the `tool_call`
 * hook, or a tool name this Pi does not have (a typo in the workflow, or a tool this session
 * was started without: a name no tool of this Pi matches can never be checked against).
 */
export function enforcementProblem(tools: readonly string[], known: ReadonlySet<string>, version: unknown): string | undefined {
	if (!piCanBlockTools(version)) {
		return `this Pi (${typeof version === "string" ? version : "unknown version"}) has no tool_call hook to block other tools (Pi ${MIN_PI_MAJOR}.x or later is needed)`;
	}
	const unknown = tools.filter((name) => !known.has(name));
	if (unknown.length === 0) return undefined;
	const which = unknown.length === 1 ? "a tool" : "tools";
	return `the step allows ${which} this Pi does not have: ${names(unknown)} (this Pi has: ${names([...known].sort())})`;
}

/**
 * Why a step whose allowed tools this Pi has cannot be presented: Pi would not turn `missing`
 * on for it (a tool registered `hidden`), so the step text would name tools the model lacks.
 */
export function unavailableProblem(missing: readonly string[]): string {
	const which = missing.length === 1 ? "a tool" : "tools";
	return `the step allows ${which} this Pi has but could not turn on for it: ${names(missing)}`;
}

/** The reason Pi gives the model for a blocked call of `toolName` during step `requestId`. */
export function blockReason(requestId: string, tools: readonly string[], toolName: string): string {
	const allowed = tools.length > 0 ? `${names(tools)} and ${WORKFLOW_TOOL}` : `only the ${WORKFLOW_TOOL} tool`;
	return (
		`Blocked by pi-workflows: workflow step ${requestId} allows ${tools.length > 0 ? "only " : ""}${allowed} ` +
		`until the step is finished; do not call ${JSON.stringify(toolName)} for this step.`
	);
}

function names(list: readonly string[]): string {
	const shown = list.slice(0, MAX_NAMES_SHOWN).join(", ");
	return list.length > MAX_NAMES_SHOWN ? `${shown}, … (${list.length - MAX_NAMES_SHOWN} more)` : shown;
}
