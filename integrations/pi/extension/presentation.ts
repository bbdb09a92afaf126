/**
 * What the session coordinator adds to a Pi session, and how it finds it there again.
 *
 * Owns the shapes of our session entries and the text they show: a workflow message is a
 * custom message of type `pi-workflows` (steps, notifications and terminal results, which the
 * model receives as user-role messages) or a custom entry of type `pi-workflows-decision` (a
 * human decision's card) or `pi-workflows-question` (a checkpoint for the person), which
 * never reach the model. The workflow message id lives only
 * in the entry's `details` (or, for the card, its `data`), never in model-visible content, and
 * finding it in the branch is the only proof the server accepts that a message was shown.
 * Also the widget and status line of the session's runs, and the text of the model's reply.
 * Pure functions: this module never contacts the server and never touches a Pi context.
 */

import type { JsonObject, JsonValue } from "./connection.ts";
import { describeModelError, oneLine } from "./errors.ts";
import { compactJson } from "./format.ts";
import {
	type ActiveRequest,
	type ChildProgress,
	type DecisionChoice,
	decisionChoices,
	isPersonsCheckpoint,
	type PresentMessage,
	type SessionRun,
	type SessionView,
	type WorkflowMessage,
} from "./operations.ts";

/** The `customType` of the custom messages that present workflow messages to the model. */
export const MESSAGE_TYPE = "pi-workflows";

/** The `customType` of the custom entries that show a human decision (never sent to the model). */
export const DECISION_ENTRY_TYPE = "pi-workflows-decision";

/** The `customType` of the custom entries that show a checkpoint for the person (never sent to the model). */
export const QUESTION_ENTRY_TYPE = "pi-workflows-question";

/** The `customType` of the custom entries that say a step was refused (never sent to the model). */
export const REFUSAL_ENTRY_TYPE = "pi-workflows-refusal";

/** The key of the extension's widget and status line. */
export const UI_KEY = "pi-workflows";

/** The most workflow messages one branch report lists (the newest ones; it must fit a frame). */
export const MAX_REPORTED = 5000;

/** The run statuses after which a run has nothing left to present. */
const FINISHED = new Set(["completed", "failed", "timed_out", "cancelled"]);

/** The most runs the widget lists. */
const MAX_WIDGET_RUNS = 5;

/**
 * What our custom messages and entries store for the extension (never sent to the model).
 * `kind` is the workflow message kind, or `rejection` for the note that asks the model to
 * reply again after its reply was rejected as an assistant-message step's output.
 */
export interface MessageDetails {
	/** The workflow message this entry presents; absent on a rejection note. */
	workflowMessageId?: string;
	/** On a rejection note: the step message whose reply was rejected. */
	stepMessageId?: string;
	runId: string;
	requestId: string | null;
	kind: string;
	/** `agent`, `assistant`, `checkpoint` or `decision` for a request's message. */
	requestKind: string | null;
	/**
	 * On a step presented with a tool limit: the tools it allows besides `workflow` (absent
	 * when the step has no limit). The limit is re-applied from here after a Pi restart.
	 */
	allowedTools?: string[];
}

/** The session entry's fields this module reads (Pi's `SessionEntry`, structurally). */
interface EntryLike {
	type?: unknown;
	id?: unknown;
	customType?: unknown;
	details?: unknown;
	data?: unknown;
}

/**
 * The workflow messages in `branch` (Pi's `getBranch()`), oldest first, each with the id of
 * the entry that holds it; at most the newest `MAX_REPORTED`.
 */
export function findPresented(branch: readonly unknown[]): PresentMessage[] {
	const found = new Map<string, string>();
	for (const item of branch) {
		if (!item || typeof item !== "object") continue;
		const entry = item as EntryLike;
		if (typeof entry.id !== "string") continue;
		let holder: unknown;
		if (entry.type === "custom_message" && entry.customType === MESSAGE_TYPE) holder = entry.details;
		else if (entry.type === "custom" && (entry.customType === DECISION_ENTRY_TYPE || entry.customType === QUESTION_ENTRY_TYPE)) {
			holder = entry.data;
		} else continue;
		const id = holder && typeof holder === "object" ? (holder as { workflowMessageId?: unknown }).workflowMessageId : undefined;
		if (typeof id === "string" && id && !found.has(id)) found.set(id, entry.id);
	}
	const present = [...found].map(([workflowMessageId, entryId]) => ({ workflowMessageId, entryId }));
	return present.length > MAX_REPORTED ? present.slice(present.length - MAX_REPORTED) : present;
}

/** True when `branch` holds anything the extension ever presented (this session was an origin). */
export function hasWorkflowEntries(branch: readonly unknown[]): boolean {
	return findPresented(branch).length > 0;
}

/** The `details` of the entry that presents `message`. */
export function detailsOf(message: WorkflowMessage): MessageDetails {
	const body = message.body;
	return {
		workflowMessageId: message.workflowMessageId,
		runId: message.runId,
		requestId: typeof body.requestId === "string" ? body.requestId : null,
		kind: message.kind,
		requestKind: typeof body.requestKind === "string" ? body.requestKind : null,
	};
}

/** The model-visible text of a step, notification, terminal or follow-up message. */
export function contentOf(message: WorkflowMessage, text: string = message.text): string {
	if (message.kind === "terminal") return terminalText(message.body);
	return text;
}

/** True when the view carries `message`'s text cut: its whole text must be read before presenting it. */
export function needsWholeText(message: WorkflowMessage): boolean {
	return message.textTruncated === true && message.kind !== "terminal";
}

/** The text of a run's terminal result: what the one presentation turn tells the model. */
export function terminalText(body: JsonObject): string {
	const lines = [
		"--- Workflow run finished ---",
		`Workflow: ${String(body.workflow ?? "?")}`,
		`Run: ${String(body.runId ?? "?")}`,
		`Status: ${String(body.status ?? "?")}`,
	];
	if (body.output !== undefined && body.output !== null) lines.push(`Output: ${compactJson(body.output)}`);
	if (body.error !== undefined && body.error !== null) lines.push(`Error: ${compactJson(body.error)}`);
	lines.push("Tell the person how the run ended; nothing else is needed for this run.");
	return lines.join("\n");
}

/** The note that asks the model to reply again after its reply was rejected as a step's output. */
export function rejectionText(requestId: string, reason: string): string {
	return [
		"--- Workflow step reply rejected ---",
		`Request: ${requestId}`,
		`Reason: ${oneLine(reason)}`,
		"Reply again with a corrected answer as a normal message; your visible reply is this step's output.",
	].join("\n");
}

/** The note that tells the model a step it replied to is closed, so it must not answer it again. */
export function closedText(requestId: string, reason: string): string {
	return [
		"--- Workflow step closed ---",
		`Request: ${requestId}`,
		`Reason: ${oneLine(reason)}`,
		"This step is closed, so your reply was not used as its output. Do not answer or submit it again unless the workflow presents it to you again.",
	].join("\n");
}

/** What the card of a refused step stores (a custom entry the model never receives). */
export interface RefusalCard {
	runId: string;
	requestId: string;
	nodeId: string;
	reason: string;
	text: string;
}

/** The card of a step the extension refused to present, for the person. */
export function refusalCard(runId: string, requestId: string, nodeId: string, reason: string): RefusalCard {
	const text =
		`pi-workflows did not present step ${nodeId} (${requestId}) of run ${runId}: ${oneLine(reason)}. ` +
		`The run is paused; fix the workflow's allowed_tools (or start Pi with those tools), then /workflow resume ${runId}.`;
	return { runId, requestId, nodeId, reason: oneLine(reason), text };
}

/** What a decision's card stores: the message's details plus what the card shows. */
export interface DecisionCard extends MessageDetails {
	text: string;
	title: string;
	choices: DecisionChoice[];
}

/** The card of a human decision (a custom entry the model never receives). */
export function decisionCard(message: WorkflowMessage, text: string = message.text): DecisionCard {
	const choices = decisionChoices({
		requestId: "",
		nodeId: "",
		kind: "decision",
		request: { choices: (message.body.choices ?? []) as JsonValue },
	});
	const title = titleOf(text);
	return { ...detailsOf(message), text, title, choices };
}

/** What a question's card stores: the message's details plus the text it shows. */
export interface QuestionCard extends MessageDetails {
	text: string;
}

/** The card of a checkpoint for the person (a custom entry the model never receives). */
export function questionCard(message: WorkflowMessage, text: string = message.text): QuestionCard {
	return { ...detailsOf(message), text };
}

function titleOf(text: string): string {
	const line = text.split("\n").find((row) => row.startsWith("Decision: "));
	return line ? line.slice("Decision: ".length) : "Decision";
}

/**
 * True for the message kinds whose presentation starts a model turn: a step, a run's result,
 * and a follow-up prompt the person queued on a completed run (its text as they wrote it).
 */
export function startsTurn(message: WorkflowMessage): boolean {
	return message.kind === "step" || message.kind === "terminal" || message.kind === "followUp";
}

/** The runs of `view` that are not finished, newest first (root runs before child runs). */
function activeRuns(view: SessionView): SessionRun[] {
	return view.runs.filter((run) => !FINISHED.has(run.status));
}

/** The runs the widget and status line show, one line each, and the line of every active run. */
interface Lines {
	runs: SessionRun[];
	/** Each active run's id -> the run id of the line it belongs to (its own for a line). */
	owner: ReadonlyMap<string, string>;
}

/**
 * The lines of `view`: a run whose parent is another active run of the view is not a line of
 * its own but belongs to its nearest ancestor that is one (a fan_out's children are their
 * parent's progress); a root run, and a child whose parent is not listed as active, is.
 */
function linesOf(view: SessionView): Lines {
	const active = activeRuns(view);
	const byId = new Map(active.map((run) => [run.runId, run]));
	const owner = new Map<string, string>();
	for (const run of active) {
		let top = run;
		const seen = new Set([run.runId]);
		for (;;) {
			const parent = top.parentRunId ? byId.get(top.parentRunId) : undefined;
			if (!parent || seen.has(parent.runId)) break;
			seen.add(parent.runId);
			top = parent;
		}
		owner.set(run.runId, top.runId);
	}
	return { runs: active.filter((run) => owner.get(run.runId) === run.runId), owner };
}

/** A parent's progress through the join it waits on, for the widget (`3/10 done, 1 failed`). */
function progressNote(children: ChildProgress | null | undefined): string {
	if (!children || typeof children !== "object") return "";
	const failed = children.failed > 0 ? `, ${children.failed} failed` : "";
	return ` ${children.ended}/${children.total} done${failed}`;
}

/** Longest progress value the widget shows on a run's line. */
const MAX_WIDGET_PROGRESS = 80;

/** The node's latest `publish_update` value, on its run's line (`: {"done":40}`). */
function latestNote(run: SessionRun): string {
	const progress = run.progress;
	if (!progress || typeof progress !== "object" || typeof progress.text !== "string") return "";
	return `: ${oneLine(progress.text, MAX_WIDGET_PROGRESS)}`;
}

/**
 * What the active request asks for, on the line of the run it belongs to: the run's own, or
 * its parent's (ancestor's) line when the request is a child run's step, naming that child.
 */
function waitingNote(run: SessionRun, active: ActiveRequest | null, owner: ReadonlyMap<string, string>): string {
	if (!active || owner.get(active.runId) !== run.runId) {
		return run.parkReason ? ` (${run.parkReason})` : "";
	}
	const child = active.runId === run.runId ? "" : ` of child run ${active.runId}`;
	if (active.kind === "decision") {
		const title = typeof active.title === "string" && active.title ? active.title : "a decision";
		return ` — decision "${oneLine(title, 80)}"${child}: /workflow decide ${active.runId}`;
	}
	if (isPersonsCheckpoint(active)) return ` — question for you${child}: /workflow answer ${active.runId}`;
	return ` — ${active.kind} ${active.requestId}${child}${active.status === "validating" ? " (validating)" : ""}`;
}

/**
 * The widget's lines for `view` (undefined clears it: no active runs): one per root run,
 * with the latest progress value of the node it runs, and a parent waiting on children
 * with their progress after its status.
 */
export function widgetLines(view: SessionView | undefined): string[] | undefined {
	if (!view) return undefined;
	const { runs, owner } = linesOf(view);
	if (runs.length === 0) return undefined;
	const lines = ["Workflows in this session:"];
	for (const run of runs.slice(0, MAX_WIDGET_RUNS)) {
		const node = run.currentNode ? ` at ${run.currentNode}${latestNote(run)}` : "";
		const progress = progressNote(run.children);
		lines.push(`  ${run.runId} ${run.workflow} ${run.status}${node}${progress}${waitingNote(run, view.activeRequest, owner)}`);
	}
	if (runs.length > MAX_WIDGET_RUNS) lines.push(`  … and ${runs.length - MAX_WIDGET_RUNS} more (/workflow status)`);
	return lines;
}

/** The status line for `view` (undefined clears it); it counts root runs, as the widget lists them. */
export function statusText(view: SessionView | undefined): string | undefined {
	if (!view) return undefined;
	const { runs } = linesOf(view);
	if (runs.length === 0) return undefined;
	const active = view.activeRequest;
	const count = `${runs.length} active run${runs.length === 1 ? "" : "s"}`;
	if (active?.kind === "decision") return `workflows: ${count}; decision waiting: /workflow decide ${active.runId}`;
	if (isPersonsCheckpoint(active)) return `workflows: ${count}; question waiting: /workflow answer ${active?.runId}`;
	if (active) return `workflows: ${count}; ${active.kind} step waiting`;
	return `workflows: ${count}`;
}

/** A session entry as this module reads it when it looks at Pi's own messages. */
interface BranchEntry extends EntryLike {
	message?: MessageLike;
}

/** Our custom message's details, when `entry` is one of our custom messages. */
function ourDetails(entry: BranchEntry): MessageDetails | undefined {
	if (entry.type !== "custom_message" || entry.customType !== MESSAGE_TYPE) return undefined;
	const details = entry.details;
	return details && typeof details === "object" ? (details as MessageDetails) : undefined;
}

/** The index of the latest of our entries in `branch` that presents `requestId` (a step or a rejection note), or -1. */
function lastEntryOf(branch: readonly unknown[], requestId: string, kinds: ReadonlySet<string>): number {
	for (let index = branch.length - 1; index >= 0; index--) {
		const details = ourDetails((branch[index] ?? {}) as BranchEntry);
		if (details && details.requestId === requestId && kinds.has(details.kind)) return index;
	}
	return -1;
}

const STEP_KINDS: ReadonlySet<string> = new Set(["step"]);
const STEP_AND_NOTE_KINDS: ReadonlySet<string> = new Set(["step", "rejection"]);

/**
 * How the latest step entry of `requestId` in `branch` recorded its tool limit: the allowed
 * tools, `null` (presented without a limit), or `undefined` (the step is not in this branch).
 */
export function presentedLimit(branch: readonly unknown[], requestId: string): string[] | null | undefined {
	const index = lastEntryOf(branch, requestId, STEP_KINDS);
	if (index < 0) return undefined;
	const tools = ourDetails(branch[index] as BranchEntry)?.allowedTools;
	return Array.isArray(tools) ? tools : null;
}

/**
 * The limit of the latest step in `branch`, for the time before the server's first view
 * says which request is active: the step's request and allowed tools, unless that step had
 * no limit or its run's result was presented after it.
 */
export function lastLimitInBranch(branch: readonly unknown[]): { requestId: string; tools: string[] } | undefined {
	for (let index = branch.length - 1; index >= 0; index--) {
		const details = ourDetails((branch[index] ?? {}) as BranchEntry);
		if (!details || details.kind !== "step") continue;
		if (!Array.isArray(details.allowedTools) || !details.requestId) return undefined;
		const runId = details.runId;
		const ended = branch.slice(index + 1).some((item) => {
			const later = ourDetails((item ?? {}) as BranchEntry);
			return later?.kind === "terminal" && later.runId === runId;
		});
		return ended ? undefined : { requestId: details.requestId, tools: details.allowedTools };
	}
	return undefined;
}

/**
 * The final reply of the turn that answered the latest presentation of the assistant-message
 * step `requestId` (its step entry, or the rejection note after it), if that turn completed:
 * the last assistant message before the next user or custom message, when it ended normally
 * (not with a tool call, an error or an abort). Its entry id names the reply for a submission.
 */
export function replyAfterStep(branch: readonly unknown[], requestId: string): { entryId: string; text: string } | undefined {
	const start = lastEntryOf(branch, requestId, STEP_AND_NOTE_KINDS);
	if (start < 0) return undefined;
	let reply: BranchEntry | undefined;
	for (const item of branch.slice(start + 1)) {
		const entry = (item ?? {}) as BranchEntry;
		if (entry.type === "custom_message") break;
		if (entry.type !== "message" || !entry.message || typeof entry.message !== "object") continue;
		if (entry.message.role === "user") break;
		if (entry.message.role === "assistant") reply = entry;
	}
	const stop = reply?.message?.stopReason;
	if (!reply || typeof reply.id !== "string" || stop === "toolUse" || stop === "error" || stop === "aborted") {
		return undefined;
	}
	return { entryId: reply.id, text: finalReplyText([reply.message]) };
}

/** The Pi message fields this module reads from an `agent_end` message list. */
interface MessageLike {
	role?: unknown;
	content?: unknown;
	stopReason?: unknown;
	errorMessage?: unknown;
}

/** The last assistant message of `messages`, if any. */
function lastAssistant(messages: readonly unknown[]): MessageLike | undefined {
	for (let index = messages.length - 1; index >= 0; index--) {
		const message = messages[index] as MessageLike | undefined;
		if (message && typeof message === "object" && message.role === "assistant") return message;
	}
	return undefined;
}

/** The visible text of the final assistant reply in `messages` ("" when there is none). */
export function finalReplyText(messages: readonly unknown[]): string {
	const content = lastAssistant(messages)?.content;
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	return content
		.filter((part): part is { type: "text"; text: string } => {
			return !!part && typeof part === "object" && part.type === "text" && typeof part.text === "string";
		})
		.map((part) => part.text)
		.join("");
}

/** True when the final assistant reply in `messages` ended with a provider error. */
export function endedWithError(messages: readonly unknown[]): boolean {
	return lastAssistant(messages)?.stopReason === "error";
}

/**
 * The provider's error text of a final reply that ended with an error ("" when there is none),
 * with Pi's "no model" error said plainly (`describeModelError`; `agentDir` is Pi's).
 */
export function providerError(messages: readonly unknown[], agentDir: string): string {
	const last = lastAssistant(messages);
	if (last?.stopReason !== "error") return "";
	return typeof last.errorMessage === "string" ? describeModelError(last.errorMessage.trim(), agentDir) : "";
}
