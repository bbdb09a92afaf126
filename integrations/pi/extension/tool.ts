/**
 * The `workflow` tool for the model: one tool whose `action` field selects list, start (from
 * this session, or `detached` in a headless Pi), status, pause, resume, cancel, restart, fork,
 * answer (an ordinary checkpoint), submit (an agent step's output) or update (an agent step's
 * progress). It restarts or forks only an ended run of this session that applied no manual
 * effect (`lineageRefusal`); it never upgrades a run (a person decides what code runs).
 *
 * Owns what the model may do and what it sees back. A refused command is thrown, so the model
 * sees the server's one-line message as the tool error and can correct itself; a step that is
 * closed (`requestClosed`) says so and that it must not be submitted again. A human decision
 * is never answered here, and a run waiting on one is neither paused nor cancelled: `answer`,
 * `pause` and `cancel` read the run's waiting request first and refuse a decision
 * (`PROTECTED_DECISION_MESSAGE`, `protectedRunMessage`; the server refuses answers too), and
 * `answer` refuses a checkpoint for the person (`personsCheckpointMessage`; the server
 * refuses `submit` for it).
 * Nor does the model resume a run whose retries ran out a round (`retriesExhausted`): only
 * a person starts a fresh round (`exhaustedRunMessage`).
 * `change-settings` is sent as the model's (`changedBy: "model"`): the server refuses it unless
 * the workflow lets the model change its settings (`Workflow(settings_changed_by=...)`).
 * `answer` and `submit` need the step's `requestId`. Runs in the Pi process, inside the tool's
 * `execute`; every retry of one call reuses that call's key.
 */

import { StringEnum } from "@earendil-works/pi-ai";
import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import { Type, type Static } from "typebox";

import { newIdempotencyKey, type Receipt } from "./client.ts";
import type { JsonObject, JsonValue } from "./connection.ts";
import { CommandRefusedError, UsageError, WorkflowError } from "./errors.ts";
import {
	bound,
	formatFollowUpQueued,
	formatFollowUps,
	formatForked,
	formatRuns,
	formatSettings,
	formatSettingsChanged,
	formatStarted,
	formatWorkflows,
	runForModel,
} from "./format.ts";
import { DECISION_KIND, isPersonsCheckpoint, type RunView } from "./operations.ts";
import type { SessionSlot } from "./session.ts";
import { WORKFLOW_TOOL } from "./toollimit.ts";

/** The tool's name, as the step contract tells the model. */
export const TOOL_NAME = WORKFLOW_TOOL;

/** The tool's answer when the model tries to answer a human decision. */
export const PROTECTED_DECISION_MESSAGE = "Protected human decisions cannot be answered by the workflow tool";

/** The tool's answer when the model tries to answer a checkpoint for the person. */
export function personsCheckpointMessage(runId: string): string {
	return (
		`Run ${runId} waits on a question for the person, not the model: the workflow tool cannot answer it; ` +
		`the person answers it (/workflow answer ${runId})`
	);
}

/** The park reason of a run whose retry policy ran out a round and waits for a person. */
export const RETRIES_EXHAUSTED = "retriesExhausted";

/** The tool's answer when the model tries to pause or cancel a run that waits on a human decision. */
export function protectedRunMessage(action: string, runId: string): string {
	return (
		`Run ${runId} waits on a protected human decision: the workflow tool cannot ${action} it; ` +
		`the person decides (/workflow decide ${runId}) or ${action}s it (/workflow ${action} ${runId})`
	);
}

/** Why the model may not resume a run whose retries ran out: only a person starts a new round. */
export function exhaustedRunMessage(runId: string): string {
	return (
		`Run ${runId} paused because a node's retries ran out (retriesExhausted): only a person ` +
		`starts a fresh round of tries (/workflow resume ${runId} or pi-workflows run resume ${runId})`
	);
}

/** The statuses of an ended run: the only runs the model may restart or fork. */
export const ENDED_STATUSES: readonly string[] = ["completed", "failed", "timed_out", "cancelled"];

/**
 * Why the model may not restart or fork `view`, or null when it may: only a run this session
 * started (its origin session), that has ended, that started no child runs and that applied
 * no manual effect (a manual effect is never repeated without a person: a restart repeats
 * every effect, a fork those at or after its node, and a run's children may have applied
 * some). Everything else is the person's (`/workflow restart|fork`).
 */
export function lineageRefusal(action: "restart" | "fork", view: RunView, sessionId: string): string | null {
	const person = `the person can (/workflow ${action} ${view.runId}${action === "fork" ? " NODE" : ""})`;
	if (view.originSession !== sessionId) {
		return `Run ${view.runId} was not started from this session: the workflow tool cannot ${action} it; ${person}`;
	}
	if (!ENDED_STATUSES.includes(view.status)) {
		return `Run ${view.runId} is ${view.status}: the workflow tool ${action}s only runs that have ended; ${person}`;
	}
	if ((view.joins ?? []).length > 0) {
		return (
			`Run ${view.runId} started child runs, whose effects a ${action} could apply again: ` +
			`the workflow tool cannot ${action} it; ${person}`
		);
	}
	if ((view.effectsOmitted ?? 0) > 0) {
		return `Run ${view.runId} has more effects than its view lists: the workflow tool cannot ${action} it; ${person}`;
	}
	const manual = (view.effects ?? []).filter((effect) => effect.kind === "manual" && effect.status === "applied");
	if (manual.length > 0) {
		return (
			`Run ${view.runId} applied a manual effect (${manual.map((e) => e.effectId).join(", ")}): ` +
			`the workflow tool cannot ${action} it, which could apply it again; ${person}`
		);
	}
	return null;
}

/** What the model is told after the server's message when the step it answers is closed. */
export const CLOSED_STEP_ADVICE =
	"this workflow step is closed: do not submit or answer it again unless the workflow presents it to you again";

export const ACTIONS = [
	"list",
	"start",
	"status",
	"pause",
	"resume",
	"cancel",
	"restart",
	"fork",
	"answer",
	"submit",
	"update",
	"settings",
	"change-settings",
	"queue-follow-up",
	"follow-ups",
	"remove-follow-up",
] as const;

/** How many runs `status` without a run id lists. */
const STATUS_LIST_LIMIT = 20;

export const workflowToolParameters = Type.Object({
	action: StringEnum(ACTIONS, {
		description:
			"list: workflows you can start; start: start `workflow` with `input` (optionally `detached`); status: one run (`runId`) or the latest runs; " +
			"pause/resume/cancel: control `runId`; restart: run the ended run `runId` again from its start; " +
			"fork: a new run from node `fromNode` (optionally `visit`, `input`) of the ended run `runId`, keeping what it finished before; " +
			"answer: answer the checkpoint `requestId` of `runId` with `value`; " +
			"submit: hand in `output` for the agent step `requestId`; update: report progress `body` for `requestId`; " +
			"settings: the run `runId`'s live settings; change-settings: change them with the JSON Patch `patch` " +
			"(only where the workflow lets the model change its settings; optionally `expectChange`); " +
			"queue-follow-up: queue `text` on `runId`, a prompt sent to this session after the run completes; " +
			"follow-ups: `runId`'s follow-ups; remove-follow-up: remove the queued follow-up `followUpId`",
	}),
	workflow: Type.Optional(Type.String({ description: "start: the workflow's name (or builtin:NAME)" })),
	input: Type.Optional(
		Type.Unknown({ description: "start: the run's input, a JSON value (default {}); fork: a new input (default: the run's)" }),
	),
	fromNode: Type.Optional(Type.String({ description: "fork: the node the new run starts at" })),
	visit: Type.Optional(Type.Integer({ minimum: 1, description: "fork: which visit of fromNode (default: the latest)" })),
	detached: Type.Optional(
		Type.Boolean({
			description:
				"start: true runs it detached: its steps go to a headless Pi the pi-workflows server runs " +
				"(session detached-<run id>), not to this session (default false)",
		}),
	),
	runId: Type.Optional(Type.String({ description: "status, pause, resume, cancel, restart, fork, answer: the run" })),
	requestId: Type.Optional(
		Type.String({ description: "submit, update, answer: the step's or checkpoint's request id (from its text)" }),
	),
	value: Type.Optional(Type.Unknown({ description: "answer: the checkpoint's answer, a JSON value" })),
	output: Type.Optional(Type.Unknown({ description: "submit: the step's output, as the step asks for it" })),
	body: Type.Optional(Type.Unknown({ description: "update: a progress update, a JSON value" })),
	reason: Type.Optional(Type.String({ description: "cancel: why" })),
	patch: Type.Optional(
		Type.Unknown({
			description:
				'change-settings: an RFC 6902 JSON Patch, a list of operations such as [{"op": "replace", "path": "/level", "value": 2}]',
		}),
	),
	text: Type.Optional(Type.String({ description: "queue-follow-up: the follow-up prompt's text" })),
	followUpId: Type.Optional(Type.String({ description: "remove-follow-up: the follow-up's id" })),
	expectChange: Type.Optional(
		Type.Integer({ minimum: 0, description: "change-settings: apply only while the settings are at this change number" }),
	),
});

export type WorkflowToolInput = Static<typeof workflowToolParameters>;

/** What every result of the tool stores in the session (never sent to the model). */
export interface WorkflowToolDetails {
	action: string;
	runId: string | null;
	outcome: string | null;
	receipt: JsonObject | null;
}

/** Register the `workflow` tool. */
export function registerWorkflowTool(pi: ExtensionAPI, slot: SessionSlot): void {
	pi.registerTool<typeof workflowToolParameters, WorkflowToolDetails>({
		name: TOOL_NAME,
		label: "Workflow",
		description:
			"Drive pi-workflows durable workflows: list workflows, start a run, read a run's status, pause/resume/cancel it, " +
			"restart or fork an ended run this session started, " +
			"answer an ordinary checkpoint, submit the output of a workflow agent step (action submit with the step's requestId), " +
			"or report progress on it (action update). Human decisions are answered by the person with /workflow decide, not by this tool.",
		promptSnippet: "Start and inspect pi-workflows runs, answer checkpoints, submit workflow agent steps",
		promptGuidelines: [
			"When a workflow step asks for a result, call the workflow tool with action submit, the step's requestId and the output it asks for.",
			"The workflow tool cannot answer human decisions; tell the person to use /workflow decide RUN.",
		],
		parameters: workflowToolParameters,
		execute(toolCallId, params, signal, _onUpdate, ctx) {
			return abortable(runAction(toolCallId, params, ctx.cwd, slot), signal);
		},
	});
}

/** One call of the tool; its idempotency key is made once and kept for every retry. */
async function runAction(
	toolCallId: string,
	params: WorkflowToolInput,
	cwd: string,
	slot: SessionSlot,
): Promise<ToolResult> {
	const key = newIdempotencyKey(`tool.${params.action}.${toolCallId}`);
	const session = slot.current();
	const operations = session.operations;
	switch (params.action) {
		case "list": {
			const workflows = await operations.listWorkflows(cwd);
			return result(params.action, null, null, formatWorkflows(workflows));
		}
		case "start": {
			const workflow = required(params.workflow, "workflow", "start");
			const detached = params.detached === true;
			const receipt = await operations.startRun(
				{
					workflow,
					input: (params.input ?? {}) as JsonValue,
					projectDir: cwd,
					originSession: session.sessionId,
					detached,
				},
				key,
			);
			return result(params.action, String(receipt.body.runId), receipt, formatStarted(receipt.body, workflow));
		}
		case "status": {
			if (!params.runId) {
				const runs = await operations.listRuns(STATUS_LIST_LIMIT);
				return result(params.action, null, null, formatRuns(runs));
			}
			const view = await operations.getRun(params.runId);
			return result(params.action, params.runId, null, runForModel(view));
		}
		case "pause":
		case "resume":
		case "cancel": {
			const runId = required(params.runId, "runId", params.action);
			const view = await operations.getRun(runId);
			if (params.action !== "resume" && view.waitingOn?.kind === DECISION_KIND) {
				throw new WorkflowError(protectedRunMessage(params.action, runId));
			}
			if (params.action === "resume" && view.parkReason === RETRIES_EXHAUSTED) {
				throw new WorkflowError(exhaustedRunMessage(runId));
			}
			const receipt = await operations.control(params.action, runId, key, params.reason);
			return result(params.action, runId, receipt, `Run ${runId} is ${String(receipt.body.status ?? "updated")}.`);
		}
		case "restart":
		case "fork": {
			const runId = required(params.runId, "runId", params.action);
			const fromNode = params.action === "fork" ? required(params.fromNode, "fromNode", "fork", "the node to start at") : "";
			const refusal = lineageRefusal(params.action, await operations.getRun(runId), session.sessionId);
			if (refusal) throw new WorkflowError(refusal);
			if (params.action === "restart") {
				const receipt = await operations.restart(runId, key);
				return result(params.action, runId, receipt, `Run ${runId} is ${String(receipt.body.status ?? "queued")} again, from its start.`);
			}
			const receipt = await operations.fork(
				runId,
				{ fromNode, visit: params.visit, input: params.input as JsonValue | undefined, originSession: session.sessionId },
				key,
			);
			return result(params.action, String(receipt.body.runId), receipt, formatForked(receipt.body));
		}
		case "answer": {
			const runId = required(params.runId, "runId", "answer");
			if (params.value === undefined) throw new UsageError("answer needs `value`, the checkpoint's answer");
			const view = await operations.getRun(runId);
			if (view.waitingOn?.kind === DECISION_KIND) throw new WorkflowError(PROTECTED_DECISION_MESSAGE);
			if (isPersonsCheckpoint(view.waitingOn)) throw new WorkflowError(personsCheckpointMessage(runId));
			const requestId = required(params.requestId, "requestId", "answer", "the checkpoint's request id, from its text");
			const receipt = await closedStep(operations.answerCheckpoint(runId, params.value as JsonValue, requestId, key));
			return result(params.action, runId, receipt, `Answered ${String(receipt.body.requestId)} of run ${runId}.`);
		}
		case "submit": {
			const requestId = required(params.requestId, "requestId", "submit", "the step's request id, from its text");
			if (params.output === undefined) throw new UsageError("submit needs `output`, the step's result");
			const receipt = await closedStep(operations.submit(requestId, params.output as JsonValue, params.runId, key));
			return result(params.action, params.runId ?? null, receipt, `Submitted the output for ${requestId}.`);
		}
		case "settings": {
			const runId = required(params.runId, "runId", "settings");
			const body = await operations.settings(runId);
			return result(params.action, runId, null, formatSettings(body));
		}
		case "change-settings": {
			const runId = required(params.runId, "runId", "change-settings");
			if (!Array.isArray(params.patch)) {
				throw new UsageError("change-settings needs `patch`, a JSON Patch: a list of operations");
			}
			const receipt = await operations.changeSettings(runId, params.patch as JsonValue, "model", params.expectChange, key);
			return result(params.action, runId, receipt, formatSettingsChanged(receipt.body));
		}
		case "queue-follow-up": {
			const runId = required(params.runId, "runId", "queue-follow-up");
			const text = required(params.text, "text", "queue-follow-up", "the prompt");
			const receipt = await operations.followUp(runId, text, key);
			return result(params.action, runId, receipt, formatFollowUpQueued(receipt.body));
		}
		case "follow-ups": {
			const runId = required(params.runId, "runId", "follow-ups");
			return result(params.action, runId, null, formatFollowUps(await operations.followUps(runId)));
		}
		case "remove-follow-up": {
			const followUpId = required(params.followUpId, "followUpId", "remove-follow-up");
			const receipt = await operations.removeFollowUp(followUpId, key);
			return result(params.action, String(receipt.body.runId), receipt, `Removed follow-up ${followUpId}.`);
		}
		case "update": {
			const requestId = required(params.requestId, "requestId", "update");
			if (params.body === undefined) throw new UsageError("update needs `body`, the progress update");
			const receipt = await closedStep(operations.update(requestId, params.body as JsonValue, params.runId, key));
			return result(params.action, params.runId ?? null, receipt, `Recorded the update for ${requestId}.`);
		}
		default:
			throw new UsageError(`unknown action ${JSON.stringify(params.action)}`);
	}
}

function required(value: string | undefined, field: string, action: string, what?: string): string {
	if (!value) throw new UsageError(`${action} needs \`${field}\`${what ? `, ${what}` : ""}`);
	return value;
}

/** `promise`, with a refusal for a closed step (`requestClosed`) saying not to try again. */
async function closedStep(promise: Promise<Receipt>): Promise<Receipt> {
	try {
		return await promise;
	} catch (error) {
		if (error instanceof CommandRefusedError && error.code === "requestClosed") {
			throw new CommandRefusedError(
				`${error.message.replace(/[.\s]+$/, "")}; ${CLOSED_STEP_ADVICE}`,
				error.operation,
				error.outcome,
				error.code,
			);
		}
		throw error;
	}
}

type ToolResult = { content: { type: "text"; text: string }[]; details: WorkflowToolDetails };

function result(action: string, runId: string | null, receipt: Receipt | null, text: string): ToolResult {
	const details: WorkflowToolDetails = {
		action,
		runId,
		outcome: receipt ? receipt.outcome : null,
		receipt: receipt ? receipt.body : null,
	};
	return { content: [{ type: "text" as const, text: bound(text) }], details };
}

/**
 * `promise`, or a rejection as soon as `signal` aborts (Escape in Pi). The command itself may
 * still take effect on the server; its rejection, if any, is still handled.
 */
function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
	if (!signal) return promise;
	return new Promise<T>((resolve, reject) => {
		const onAbort = () =>
			reject(new WorkflowError("the workflow tool call was aborted; the command may still take effect"));
		if (signal.aborted) {
			onAbort();
			promise.catch(() => undefined);
			return;
		}
		signal.addEventListener("abort", onAbort, { once: true });
		promise.then(
			(value) => {
				signal.removeEventListener("abort", onAbort);
				resolve(value);
			},
			(error: unknown) => {
				signal.removeEventListener("abort", onAbort);
				reject(error);
			},
		);
	});
}
