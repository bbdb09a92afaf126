/**
 * The `/workflow` command for the person: list workflows, start, inspect and control runs
 * (pause, resume, cancel, restart, fork, upgrade), answer checkpoints (with JSON, or in a text
 * dialog: `questions.ts`) and decide human decisions.
 *
 * Owns parsing the command line and showing results as Pi notifications; every failure is one
 * line at the `error` level. Runs in the Pi process, in the command's handler. Project workflows
 * are found from Pi's working directory (sent as `projectDir`), and a run started here records
 * this Pi session as its origin (`originSession`), unless it is started `--detached` (then a
 * headless Pi the server runs presents its steps). Notifications go through `notify`, which
 * never throws, because a context used after the session ended throws in Pi 1.x.
 */

import type { ExtensionAPI, ExtensionCommandContext } from "@earendil-works/pi-coding-agent";

import { newIdempotencyKey } from "./client.ts";
import type { JsonValue } from "./connection.ts";
import { describeError, UsageError } from "./errors.ts";
import {
	formatForked,
	formatNewestRuns,
	formatRun,
	formatFollowUpQueued,
	formatFollowUps,
	formatRuns,
	formatSettings,
	formatSettingsChanged,
	formatStarted,
	formatUpgrade,
	formatWorkflows,
} from "./format.ts";
import { DECISION_KIND, decisionChoices, type DecisionChoice } from "./operations.ts";
import { askedText, askInDialog } from "./questions.ts";
import type { SessionSlot } from "./session.ts";

/** The command's name: `/workflow`. */
export const COMMAND_NAME = "workflow";

/** `/workflow start NAME [JSON] --detached`: run it in a headless Pi the server runs. */
const DETACHED_FLAG = "--detached";

/** How many runs `/workflow status` lists without a run id. */
const STATUS_LIST_LIMIT = 10;

/** How many of the newest runs `/workflow list` shows under the workflows. */
const LIST_RUNS_LIMIT = 5;

const SUBCOMMANDS = [
	"list",
	"start",
	"status",
	"pause",
	"resume",
	"cancel",
	"restart",
	"fork",
	"upgrade",
	"answer",
	"decide",
	"settings",
	"change-settings",
	"queue-follow-up",
	"follow-ups",
	"remove-follow-up",
	"help",
] as const;

/** `/workflow upgrade RUN --dry-run`: only say what would change. */
const DRY_RUN_FLAG = "--dry-run";

/** `/workflow fork RUN NODE --visit N`: which visit of NODE. */
const VISIT_FLAG = "--visit";

export const USAGE = [
	"Usage: /workflow <subcommand>",
	"  list                    workflows you can start (project, user, built-in)",
	"                          and the newest runs",
	"  start NAME [JSON] [--detached]",
	"                          start a run of NAME with JSON input (default {});",
	"                          --detached: a headless Pi the server runs does its steps",
	"  status [RUN]            one run, or the latest runs",
	"  pause RUN | resume RUN  pause or resume a run",
	"  cancel RUN [REASON]     cancel a run",
	"  restart RUN             run it again from its start (also a completed run)",
	"  fork RUN NODE [--visit N] [JSON] [--detached]",
	"                          a new run at NODE of RUN on the current code, keeping what",
	"                          RUN finished before it (JSON: a new input)",
	"  upgrade RUN [--dry-run] let a parked run continue on the workflow's current code",
	"  answer RUN [JSON]       answer the checkpoint RUN waits on (a dialog without JSON)",
	"  decide RUN [CHOICE]     decide the human decision RUN waits on (a dialog without CHOICE)",
	"  settings RUN            the run's live settings and their change number",
	"  change-settings RUN PATCH [--expect-change N]",
	"                          change them with an RFC 6902 JSON Patch (a JSON list of operations)",
	"  queue-follow-up [RUN] TEXT",
	"                          a prompt sent here after RUN (default: this session's run going on)",
	"                          completes and its result is presented",
	"  follow-ups RUN          the run's follow-ups and what became of each",
	"  remove-follow-up ID     remove a follow-up that is still queued",
].join("\n");

type Level = "info" | "warning" | "error";

/** Show `message` in Pi; never throws (the context may belong to a session that has ended). */
export function notify(ctx: ExtensionCommandContext, message: string, level: Level = "info"): void {
	try {
		if (ctx.hasUI) ctx.ui.notify(message, level);
	} catch {
		// The session ended while the command ran: there is nowhere left to show it.
	}
}

/** Register `/workflow`. */
export function registerWorkflowCommand(pi: ExtensionAPI, slot: SessionSlot): void {
	pi.registerCommand(COMMAND_NAME, {
		description:
			"pi-workflows: list, start, status, pause, resume, cancel, restart, fork, upgrade, answer, decide, settings, " +
			"change-settings, queue-follow-up, follow-ups, remove-follow-up",
		getArgumentCompletions: (prefix: string) => {
			if (/\s/.test(prefix)) return null;
			const matches = SUBCOMMANDS.filter((name) => name.startsWith(prefix));
			return matches.length ? matches.map((name) => ({ value: name, label: name })) : null;
		},
		handler: async (args: string, ctx: ExtensionCommandContext) => {
			const [subcommand, rest] = splitWord(args);
			try {
				await runSubcommand(subcommand, rest, ctx, slot);
			} catch (error) {
				const what = subcommand ? `/workflow ${subcommand}` : "/workflow";
				notify(ctx, `${what} failed: ${describeError(error)}`, "error");
			}
		},
	});
}

async function runSubcommand(subcommand: string, rest: string, ctx: ExtensionCommandContext, slot: SessionSlot): Promise<void> {
	switch (subcommand) {
		case "":
		case "help":
			notify(ctx, USAGE);
			return;
		case "list": {
			const operations = slot.current().operations;
			const workflows = await operations.listWorkflows(ctx.cwd);
			const runs = await operations.listRuns(LIST_RUNS_LIMIT + 1);
			notify(ctx, `${formatWorkflows(workflows)}\n${formatNewestRuns(runs, LIST_RUNS_LIMIT)}`);
			return;
		}
		case "start": {
			const [detached, words] = takeFlag(rest, DETACHED_FLAG);
			const [name, inputText] = splitWord(words);
			if (!name || name.startsWith("--")) throw new UsageError("usage: /workflow start NAME [JSON] [--detached]");
			const input = inputText ? parseJson(inputText, "the input") : {};
			const session = slot.current();
			const receipt = await session.operations.startRun(
				{ workflow: name, input, projectDir: ctx.cwd, originSession: session.sessionId, detached },
				newIdempotencyKey("command.start"),
			);
			notify(ctx, formatStarted(receipt.body, name));
			return;
		}
		case "status": {
			const [runId] = splitWord(rest);
			const operations = slot.current().operations;
			if (!runId) {
				notify(ctx, formatRuns(await operations.listRuns(STATUS_LIST_LIMIT)));
				return;
			}
			notify(ctx, formatRun(await operations.getRun(runId)));
			return;
		}
		case "pause":
		case "resume":
		case "cancel": {
			const [runId, reason] = splitWord(rest);
			if (!runId) throw new UsageError(`usage: /workflow ${subcommand} RUN${subcommand === "cancel" ? " [REASON]" : ""}`);
			const receipt = await slot
				.current()
				.operations.control(subcommand, runId, newIdempotencyKey(`command.${subcommand}`), reason || undefined);
			notify(ctx, `Run ${runId} is ${String(receipt.body.status ?? "updated")}.`);
			return;
		}
		case "restart": {
			const [runId] = splitWord(rest);
			if (!runId) throw new UsageError("usage: /workflow restart RUN");
			const receipt = await slot.current().operations.restart(runId, newIdempotencyKey("command.restart"));
			notify(ctx, `Run ${runId} is ${String(receipt.body.status ?? "queued")} again, from its start.`);
			return;
		}
		case "fork": {
			await fork(rest, ctx, slot);
			return;
		}
		case "upgrade": {
			const [dryRun, words] = takeFlag(rest, DRY_RUN_FLAG);
			const [runId] = splitWord(words);
			if (!runId) throw new UsageError("usage: /workflow upgrade RUN [--dry-run]");
			const receipt = await slot.current().operations.upgrade(runId, dryRun, newIdempotencyKey("command.upgrade"));
			notify(ctx, formatUpgrade(receipt.body, dryRun));
			return;
		}
		case "answer": {
			const [runId, valueText] = splitWord(rest);
			if (!runId) throw new UsageError("usage: /workflow answer RUN [JSON]");
			if (!valueText) {
				if (!ctx.hasUI) throw new UsageError(`give the answer: /workflow answer ${runId} JSON`);
				const asked = await askInDialog(ctx.ui, slot.current().operations, runId);
				const { text, level } = askedText(runId, asked);
				notify(ctx, text, level);
				return;
			}
			const value = parseJson(valueText, "the answer");
			const receipt = await slot
				.current()
				.operations.answerCheckpoint(runId, value, undefined, newIdempotencyKey("command.answer"));
			notify(ctx, `Answered ${String(receipt.body.requestId)} of run ${runId}.`);
			return;
		}
		case "decide": {
			await decide(rest, ctx, slot);
			return;
		}
		case "settings": {
			const [runId] = splitWord(rest);
			if (!runId) throw new UsageError("usage: /workflow settings RUN");
			notify(ctx, formatSettings(await slot.current().operations.settings(runId)));
			return;
		}
		case "change-settings": {
			await changeSettings(rest, ctx, slot);
			return;
		}
		case "queue-follow-up": {
			await queueFollowUp(rest, ctx, slot);
			return;
		}
		case "follow-ups": {
			const [runId] = splitWord(rest);
			if (!runId) throw new UsageError("usage: /workflow follow-ups RUN");
			notify(ctx, formatFollowUps(await slot.current().operations.followUps(runId)));
			return;
		}
		case "remove-follow-up": {
			const [followUpId] = splitWord(rest);
			if (!followUpId) throw new UsageError("usage: /workflow remove-follow-up ID");
			const receipt = await slot
				.current()
				.operations.removeFollowUp(followUpId, newIdempotencyKey("command.remove-follow-up"));
			notify(ctx, `Removed follow-up ${followUpId} of run ${String(receipt.body.runId)}.`);
			return;
		}
		default:
			throw new UsageError(`unknown subcommand ${JSON.stringify(subcommand)}; try /workflow help`);
	}
}

/** `/workflow fork RUN NODE [--visit N] [JSON] [--detached]`: the fork is presented in this session. */
async function fork(rest: string, ctx: ExtensionCommandContext, slot: SessionSlot): Promise<void> {
	const usage = "usage: /workflow fork RUN NODE [--visit N] [JSON] [--detached]";
	const [detached, words] = takeFlag(rest, DETACHED_FLAG);
	const [runId, afterRun] = splitWord(words);
	const [node, afterNode] = splitWord(afterRun);
	if (!runId || !node || node.startsWith("--")) throw new UsageError(usage);
	let visit: number | undefined;
	let inputText = afterNode;
	const [flag, afterFlag] = splitWord(afterNode);
	if (flag === VISIT_FLAG) {
		const [number, remaining] = splitWord(afterFlag);
		visit = Number(number);
		if (!/^[1-9][0-9]*$/.test(number)) throw new UsageError(`--visit needs a whole number from 1, not ${JSON.stringify(number)}`);
		inputText = remaining;
	}
	const input = inputText ? parseJson(inputText, "the input") : undefined;
	const session = slot.current();
	const receipt = await session.operations.fork(
		runId,
		{ fromNode: node, visit, input, originSession: session.sessionId, detached },
		newIdempotencyKey("command.fork"),
	);
	notify(ctx, formatForked(receipt.body));
}

/** A run id as the server makes them (`run_` and 26 lowercase letters and digits). */
const RUN_ID = /^run_[0-9a-z]{10,40}$/;

/**
 * `/workflow queue-follow-up [RUN] TEXT`: queue TEXT on RUN, or on this session's one run
 * that is going on (a root run; several: the person names one).
 */
async function queueFollowUp(rest: string, ctx: ExtensionCommandContext, slot: SessionSlot): Promise<void> {
	const usage = "usage: /workflow queue-follow-up [RUN] TEXT";
	const [first, afterFirst] = splitWord(rest);
	const session = slot.current();
	let runId = first;
	let text = afterFirst;
	if (!RUN_ID.test(first)) {
		text = rest.trim();
		const going = (await session.operations.sessionRuns(session.sessionId)).filter(
			(run) => !run.parentRunId && !ENDED.has(run.status),
		);
		if (going.length !== 1) {
			const which = going.length
				? `${going.length} runs of this session are going on (${going.map((run) => run.runId).join(", ")}): name one`
				: "no run of this session is going on: name the run";
			throw new UsageError(`${which}; ${usage}`);
		}
		runId = going[0]?.runId ?? "";
	}
	if (!text.trim()) throw new UsageError(usage);
	const receipt = await session.operations.followUp(runId, text, newIdempotencyKey("command.queue-follow-up"));
	notify(ctx, formatFollowUpQueued(receipt.body));
}

/** Statuses of a run that has ended. */
const ENDED: ReadonlySet<string> = new Set(["completed", "failed", "timed_out", "cancelled"]);

/** `/workflow change-settings RUN PATCH [--expect-change N]`: a person's change of the run's settings. */
async function changeSettings(rest: string, ctx: ExtensionCommandContext, slot: SessionSlot): Promise<void> {
	const usage = "usage: /workflow change-settings RUN PATCH [--expect-change N]";
	const [runId, afterRun] = splitWord(rest);
	if (!runId) throw new UsageError(usage);
	let patchText = afterRun.trim();
	let expectChange: number | undefined;
	const flag = patchText.match(/\s--expect-change\s+(\S+)\s*$/);
	if (flag) {
		const number = flag[1] ?? "";
		if (!/^(0|[1-9][0-9]*)$/.test(number)) {
			throw new UsageError(`--expect-change needs a whole number from 0, not ${JSON.stringify(number)}`);
		}
		expectChange = Number(number);
		patchText = patchText.slice(0, flag.index).trim();
	}
	if (!patchText) throw new UsageError(usage);
	const patch = parseJson(patchText, "the patch");
	if (!Array.isArray(patch)) {
		throw new UsageError('the patch must be a JSON list of operations, such as [{"op": "replace", "path": "/level", "value": 2}]');
	}
	const receipt = await slot
		.current()
		.operations.changeSettings(runId, patch, "person", expectChange, newIdempotencyKey("command.change-settings"));
	notify(ctx, formatSettingsChanged(receipt.body));
}

/** `/workflow decide RUN [CHOICE]`: without CHOICE, a select dialog of the decision's choices. */
async function decide(rest: string, ctx: ExtensionCommandContext, slot: SessionSlot): Promise<void> {
	const [runId, given] = splitWord(rest);
	if (!runId) throw new UsageError("usage: /workflow decide RUN [CHOICE]");
	const operations = slot.current().operations;
	const view = await operations.getRun(runId);
	const waiting = view.waitingOn;
	if (!waiting || waiting.kind !== DECISION_KIND) {
		throw new UsageError(`run ${runId} is not waiting on a human decision (status ${view.status})`);
	}
	const choices = decisionChoices(waiting);
	let choice = given.trim();
	if (!choice) {
		if (!ctx.hasUI) {
			throw new UsageError(`give the choice: /workflow decide ${runId} CHOICE (${choices.map((c) => c.id).join(", ")})`);
		}
		const picked = await pickChoice(ctx, waiting.request, choices);
		if (picked === undefined) {
			notify(ctx, `No choice made; run ${runId} still waits on its decision.`, "warning");
			return;
		}
		choice = picked;
	}
	const receipt = await operations.answerDecision(runId, choice, waiting.requestId, newIdempotencyKey("command.decide"));
	notify(ctx, `Decided ${choice} for run ${runId} (${String(receipt.body.requestId)}).`);
}

/** The select dialog; resolves with the chosen id, or undefined when dismissed. */
async function pickChoice(
	ctx: ExtensionCommandContext,
	request: JsonValue,
	choices: DecisionChoice[],
): Promise<string | undefined> {
	const title =
		request && typeof request === "object" && !Array.isArray(request) && typeof request.title === "string"
			? request.title
			: "Decide";
	const options = choices.map((choice) =>
		choice.description ? `${choice.label} [${choice.id}] — ${choice.description}` : `${choice.label} [${choice.id}]`,
	);
	const selected = await ctx.ui.select(title, options);
	if (selected === undefined) return undefined;
	const index = options.indexOf(selected);
	return index >= 0 ? choices[index]?.id : undefined;
}

/**
 * Whether `flag` is the first or the last word of `text`, and `text` without it (trimmed).
 * Only those two places are looked at, so JSON in between is never taken apart.
 */
export function takeFlag(text: string, flag: string): [boolean, string] {
	const trimmed = text.trim();
	if (trimmed === flag) return [true, ""];
	if (trimmed.startsWith(`${flag} `)) return [true, trimmed.slice(flag.length).trim()];
	if (/\s$/.test(trimmed.slice(0, -flag.length)) && trimmed.endsWith(flag)) {
		return [true, trimmed.slice(0, -flag.length).trim()];
	}
	return [false, trimmed];
}

/** The first whitespace-separated word of `text` and the rest (trimmed). */
export function splitWord(text: string): [string, string] {
	const trimmed = text.trim();
	const match = /^(\S+)\s*([\s\S]*)$/.exec(trimmed);
	if (!match) return ["", ""];
	return [match[1] ?? "", (match[2] ?? "").trim()];
}

function parseJson(text: string, what: string): JsonValue {
	try {
		return JSON.parse(text) as JsonValue;
	} catch (error) {
		throw new UsageError(`${what} is not valid JSON: ${describeError(error)}`);
	}
}
