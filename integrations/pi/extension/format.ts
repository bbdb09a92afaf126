/**
 * Text for the person (`/workflow` notifications) and the model (`workflow` tool results):
 * workflow lists, run lists, run views and a started run.
 *
 * Owns every rendering of server data. Values that came from the server or from workflows are
 * shown as compact JSON or plain strings and bounded in length. Pure functions: this module
 * never contacts the server and never touches a Pi context.
 */

import { oneLine } from "./errors.ts";
import type { JsonObject, JsonValue } from "./connection.ts";
import { decisionChoices, isPersonsCheckpoint, type RunSummary, type RunView, type WorkflowInfo } from "./operations.ts";

/** The longest JSON value shown inline. */
const MAX_INLINE_JSON = 2000;

/** The longest tool result sent to the model (Pi's own tools cap output at 50 KB). */
export const MAX_TOOL_TEXT = 40_000;

/** Compact JSON, bounded to `limit` characters. */
export function compactJson(value: JsonValue | undefined, limit: number = MAX_INLINE_JSON): string {
	const text = value === undefined ? "null" : JSON.stringify(value);
	return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

/**
 * The sentence for a run `run.start` just started (its receipt's `body`): `Started run R of
 * workflow W.`, and for a detached run that a headless Pi on its own session runs its steps.
 */
export function formatStarted(body: JsonObject, workflow: string): string {
	const runId = String(body.runId);
	const name = String(body.workflow ?? workflow);
	if (body.detached !== true) return `Started run ${runId} of workflow ${name}.`;
	const session = String(body.originSession ?? `detached-${runId}`);
	return `Started detached run ${runId} of workflow ${name}; a headless Pi the server runs does its steps (session ${session}).`;
}

/** The lines for a fork `run.fork` just made (its receipt's `body`): what it carried, the effects ahead. */
export function formatForked(body: JsonObject): string {
	const lines = [
		`Forked run ${String(body.runId)} from run ${String(body.sourceRunId)} at node ${String(body.nodeId)} ` +
			`(visit ${String(body.visit)}): ${String(body.carriedAttempts ?? 0)} node result(s) and ` +
			`${String(body.carriedEffects ?? 0)} settled effect(s) carried.`,
	];
	const ahead = Array.isArray(body.effectsAhead) ? body.effectsAhead : [];
	if (ahead.length === 0) lines.push("No managed effect lies ahead of it.");
	for (const effect of ahead) {
		if (!effect || typeof effect !== "object" || Array.isArray(effect)) continue;
		const again = effect.appliedInSource === true ? "; the source applied it already" : "";
		lines.push(`effect ahead: ${String(effect.nodeId)} ${String(effect.type)} (${String(effect.kind)})${again}`);
	}
	return lines.join("\n");
}

/** An upgrade plan (`run.upgrade`'s receipt, or its dry run): what changes, or why it cannot. */
export function formatUpgrade(body: JsonObject, dryRun: boolean): string {
	const runId = String(body.runId);
	const lines = [
		dryRun
			? `Run ${runId} ${body.possible === true ? "can" : "cannot"} be upgraded to the workflow's current code.`
			: `Run ${runId} now runs the workflow's current code; it is ${String(body.status)}.`,
	];
	const changes = Array.isArray(body.changes) ? body.changes.map(String) : [];
	lines.push(`graph: ${changes.length ? changes.join("; ") : "no change to its nodes or routes"}`);
	if (typeof body.refusal === "string") lines.push(`refused: ${oneLine(body.refusal, 300)}`);
	if (body.unchanged === true) lines.push("it already runs the workflow's current code");
	for (const problem of Array.isArray(body.problems) ? body.problems : []) {
		lines.push(`cannot carry it: ${oneLine(String(problem), 300)}`);
	}
	const request = body.recreatesRequest;
	if (request && typeof request === "object" && !Array.isArray(request)) {
		lines.push(`its open ${String(request.kind)} step at node ${String(request.nodeId)} is presented again from the new code`);
	}
	if (body.continues === true) lines.push("then it continues");
	return lines.join("\n");
}

/** `workflows.list` as one line each: `name (origin): summary — path` (`name (origin) path`
 * without a summary), and a load error when there is one. */
export function formatWorkflows(workflows: WorkflowInfo[]): string {
	if (workflows.length === 0) return "No workflows found (looked in .pi/workflows, ~/.pi/agent/workflows and the built-ins).";
	const lines = workflows.map((workflow) => {
		const error = workflow.error ? ` — does not load: ${oneLine(workflow.error, 300)}` : "";
		const summary = workflow.summary ? `: ${oneLine(workflow.summary, 200)} —` : "";
		return `${workflow.name} (${workflow.origin})${summary} ${workflow.path}${error}`;
	});
	return ["Workflows:", ...lines].join("\n");
}

/** `run.list` as one line per run. */
export function formatRuns(runs: RunSummary[]): string {
	if (runs.length === 0) return "No runs.";
	const lines = runs.map((run) => {
		const reason = run.parkReason ? ` (${run.parkReason})` : "";
		const node = run.currentNode ? ` at ${run.currentNode}` : "";
		return `${run.runId} ${run.workflow} ${run.status}${reason}${node}`;
	});
	return ["Runs (newest first):", ...lines].join("\n");
}

/**
 * The newest runs under `/workflow list`: at most `limit` of `runs` (fetched one more, to know
 * whether there are others), and where the rest are; one line when there is none.
 */
export function formatNewestRuns(runs: RunSummary[], limit: number): string {
	if (runs.length === 0) return "No runs yet; start one with /workflow start NAME.";
	const lines = runs.slice(0, limit).map((run) => {
		const reason = run.parkReason ? ` (${run.parkReason})` : "";
		return `${run.runId} ${run.workflow} ${run.status}${reason}`;
	});
	const more = runs.length > limit ? "more: /workflow status, or pi-workflows run list; " : "";
	return ["Newest runs:", ...lines, `(${more}one run: /workflow status RUN)`].join("\n");
}

/** One run for the person: status, node, what it waits on, error and output. */
export function formatRun(view: RunView): string {
	const reason = view.parkReason ? ` (${view.parkReason})` : "";
	const lines = [`Run ${view.runId} of ${view.workflow}: ${view.status}${reason}`];
	if (view.status === "paused" && view.parkReason === "workflowSourceChanged") lines.push(codeChangedAdvice(view.runId));
	if (view.currentNode) lines.push(`node: ${view.currentNode}`);
	const progress = view.progress;
	if (progress) lines.push(`progress of ${progress.nodeId}: ${oneLine(progress.text, 300)}`);
	const waiting = view.waitingOn;
	if (waiting) {
		lines.push(`waiting on: ${waiting.kind} ${waiting.requestId} at node ${waiting.nodeId}`);
		if (waiting.kind === "decision") {
			const request = waiting.request;
			const title =
				request && typeof request === "object" && !Array.isArray(request) && typeof request.title === "string"
					? request.title
					: "";
			if (title) lines.push(`decision: ${oneLine(title, 300)}`);
			const choices = decisionChoices(waiting).map((choice) => `${choice.id} (${choice.label})`);
			if (choices.length) lines.push(`choices: ${choices.join(", ")} — answer with /workflow decide ${view.runId}`);
		} else {
			lines.push(`request: ${compactJson(waiting.request)}`);
			if (isPersonsCheckpoint(waiting)) lines.push(`a question for you: answer it with /workflow answer ${view.runId}`);
		}
	}
	const wait = view.wait;
	if (wait) {
		lines.push(`waits: ${oneLine(wait.text, 300)}`);
		if (wait.kind === "event" && wait.event) {
			lines.push(`send it with: pi-workflows run signal ${view.runId} ${wait.event} --data JSON`);
		}
	}
	if (view.error !== undefined && view.error !== null) lines.push(`error: ${compactJson(view.error)}`);
	if (view.output !== undefined && view.output !== null) lines.push(`output: ${compactJson(view.output)}`);
	return lines.join("\n");
}

/**
 * What to do with a run parked because its workflow's code changed: `/workflow resume` would
 * be refused (it would only park again), so name the upgrade (dry run first), restart and cancel.
 */
export function codeChangedAdvice(runId: string): string {
	return (
		`its workflow's code changed since it started: see what an upgrade would change with /workflow upgrade ${runId} --dry-run, ` +
		`then continue it on the new code with /workflow upgrade ${runId}; or start it over with /workflow restart ${runId}, ` +
		`or end it with /workflow cancel ${runId}`
	);
}

/** One run for the model: the fields it acts on, as JSON (`waitingOn` holds the `requestId`). */
export function runForModel(view: RunView): string {
	const shown: { [key: string]: JsonValue } = {
		runId: view.runId,
		workflow: view.workflow,
		status: view.status,
		parkReason: view.parkReason ?? null,
		currentNode: view.currentNode ?? null,
		waitingOn: view.waitingOn ? (view.waitingOn as unknown as JsonValue) : null,
		waits: view.wait ? view.wait.text : null,
		output: view.output ?? null,
		error: view.error ?? null,
	};
	return bound(JSON.stringify(shown, null, 2));
}

/** `text` cut to what a tool result may carry, saying so when it was cut. */
/** `run.settings`'s answer as lines: the change number, who may change them, the document. */
export function formatSettings(body: JsonObject): string {
	const runId = String(body.runId ?? "");
	if (!body.declared && (body.settings === null || body.settings === undefined)) {
		return `Run ${runId}: its workflow declares no settings.`;
	}
	const who = Array.isArray(body.changedBy) && body.changedBy.length ? body.changedBy.join(" and ") : "nobody";
	return `Run ${runId} settings (change ${String(body.change)}, changed by ${who}): ${compactJson(body.settings as JsonValue, 2000)}`;
}

/** A `run.changeSettings` receipt as one line. */
export function formatSettingsChanged(body: JsonObject): string {
	return `Run ${String(body.runId)} settings are at change ${String(body.change)}: ${compactJson(body.settings as JsonValue, 2000)}`;
}

/** `run.followUps`'s answer as lines: each follow-up's number, id, state and text. */
export function formatFollowUps(body: JsonObject): string {
	const runId = String(body.runId ?? "");
	const listed = Array.isArray(body.followUps) ? (body.followUps as JsonObject[]) : [];
	if (!listed.length) return `Run ${runId} has no follow-ups.`;
	const lines = [`Run ${runId} (${String(body.status ?? "?")}): ${listed.length} follow-up(s)`];
	for (const entry of listed) {
		let state = String(entry.status);
		if (state === "queued") state = "queued (sent after the run completes)";
		else if (state === "ready") state = "being sent";
		else if (state === "cancelled") state = `cancelled: ${String(entry.reason)}`;
		const text = String(entry.text ?? "").replace(/\s+/g, " ");
		lines.push(`  #${String(entry.seq)} ${String(entry.followUpId)} ${state}: ${text.length > 100 ? `${text.slice(0, 97)}...` : text}`);
	}
	return lines.join("\n");
}

/** A `run.followUp` receipt as one line. */
export function formatFollowUpQueued(body: JsonObject): string {
	return (
		`Queued follow-up ${String(body.followUpId)} (#${String(body.seq)}) on run ${String(body.runId)}; ` +
		"it is sent here after the run completes and its result is presented."
	);
}

export function bound(text: string, limit: number = MAX_TOOL_TEXT): string {
	if (text.length <= limit) return text;
	return `${text.slice(0, limit)}\n[truncated: ${text.length - limit} more characters]`;
}
