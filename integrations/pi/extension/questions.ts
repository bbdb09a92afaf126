/**
 * Asking the person a workflow checkpoint's question in a Pi text dialog, and sending what
 * they type as the checkpoint's answer.
 *
 * Owns the dialog's words, how typed text becomes the answer (`answerFromText`, from the
 * checkpoint's `answerSchema`), and the loop: ask, send `checkpoint.answer`, and on a
 * rejection (the workflow's `validate` or the typed contract refused it) ask again with the
 * workflow's message, until the answer is taken, the person dismisses the dialog, or the
 * request closes. `QuestionDialogs` opens the dialog by itself for the session's active
 * checkpoint for the person (`checkpoint(for_person=True)`), once per presentation per Pi
 * process, and closes it when that request stops being active; `/workflow answer RUN`
 * (command.ts) opens it for any checkpoint. The server validates every answer; this module
 * never decides whether an answer is good. Runs in the Pi process; never runs while no
 * person can answer (no UI, or a detached run's headless Pi).
 */

import type { ExtensionUIContext } from "@earendil-works/pi-coding-agent";

import { newIdempotencyKey } from "./client.ts";
import type { JsonObject, JsonValue } from "./connection.ts";
import { CommandRefusedError, describeError, oneLine, UsageError } from "./errors.ts";
import {
	type ActiveRequest,
	CHECKPOINT_KIND,
	isPersonsCheckpoint,
	SUBMIT_WAIT_MS,
	type WorkflowOperations,
} from "./operations.ts";

/** The longest question (and expected answer) the dialog's title shows. */
const MAX_TITLE_CHARS = 300;

/** How typed text becomes the answer: the text itself, the text as one field, or JSON. */
export type AnswerShape = { kind: "text" } | { kind: "field"; name: string } | { kind: "json" };

function isObject(value: unknown): value is Record<string, unknown> {
	return !!value && typeof value === "object" && !Array.isArray(value);
}

function isStringSchema(value: unknown): boolean {
	return isObject(value) && value.type === "string";
}

/**
 * The shape of an answer to a checkpoint whose answer schema is `schema` (undefined: an
 * untyped checkpoint): a string schema takes the text as it is; an object schema whose one
 * required field (or, with none required, whose one field) is a string takes
 * `{field: text}`; anything else is typed as JSON.
 */
export function answerShape(schema: unknown): AnswerShape {
	if (isStringSchema(schema)) return { kind: "text" };
	if (isObject(schema) && schema.type === "object" && isObject(schema.properties)) {
		const properties = schema.properties;
		const required = Array.isArray(schema.required) ? schema.required.filter((n) => typeof n === "string") : [];
		const candidates = required.length > 0 ? required : Object.keys(properties);
		const [name] = candidates;
		if (candidates.length === 1 && name !== undefined && isStringSchema(properties[name])) return { kind: "field", name };
	}
	return { kind: "json" };
}

/**
 * The answer the person's `text` gives for `shape`: the text, `{field: text}`, or the text
 * read as JSON (an untyped checkpoint takes text that is not JSON as a string; a typed one
 * sends it as typed, and the server's schema check says what is wrong).
 */
export function answerFromText(text: string, shape: AnswerShape): JsonValue {
	const trimmed = text.trim();
	if (shape.kind === "text") return trimmed;
	if (shape.kind === "field") return { [shape.name]: trimmed };
	try {
		return JSON.parse(trimmed) as JsonValue;
	} catch {
		return trimmed;
	}
}

/** What the dialog shows: the question, and for a JSON answer what it must look like. */
export function dialogTitle(runId: string, request: JsonValue, shape: AnswerShape, rejection?: string): string {
	const fields = isObject(request) ? request : {};
	const question = typeof fields.question === "string" && fields.question ? fields.question : "Your answer?";
	const lines = [`Workflow run ${runId} asks you: ${oneLine(question, MAX_TITLE_CHARS)}`];
	if (shape.kind === "json") {
		const expected = typeof fields.expectedAnswer === "string" ? oneLine(fields.expectedAnswer, MAX_TITLE_CHARS) : "";
		lines.push(expected ? `Answer with JSON: ${expected}` : "Answer with a JSON value (text that is not JSON is sent as a string)");
	}
	if (rejection) lines.push(`Not accepted: ${oneLine(rejection, MAX_TITLE_CHARS)}; answer again.`);
	return lines.join("\n");
}

/** How one round of asking ended. */
export type Asked =
	| { outcome: "answered"; requestId: string }
	| { outcome: "dismissed"; requestId: string }
	| { outcome: "closed"; requestId: string; reason: string };

/**
 * Ask the checkpoint `runId` waits on (`requestId`, when given, must be it) in a text dialog
 * and send the answer; a rejected answer is asked again with the workflow's message. Throws
 * `UsageError` when the run waits on no checkpoint, and the server's refusal for anything
 * but a rejection or a closed request.
 */
export async function askInDialog(
	ui: Pick<ExtensionUIContext, "input">,
	operations: WorkflowOperations,
	runId: string,
	requestId?: string,
	signal?: AbortSignal,
): Promise<Asked> {
	const view = await operations.getRun(runId);
	const waiting = view.waitingOn;
	if (!waiting || waiting.kind !== CHECKPOINT_KIND || (requestId !== undefined && waiting.requestId !== requestId)) {
		throw new UsageError(`run ${runId} is not waiting on a checkpoint (status ${view.status})`);
	}
	const schema = isObject(waiting.request) ? (waiting.request as JsonObject).answerSchema : undefined;
	const shape = answerShape(schema);
	const placeholder = shape.kind === "json" ? "a JSON value" : "your answer";
	let rejection: string | undefined;
	for (;;) {
		const text = await ui.input(dialogTitle(runId, waiting.request, shape, rejection), placeholder, signal ? { signal } : undefined);
		if (text === undefined || signal?.aborted) return { outcome: "dismissed", requestId: waiting.requestId };
		const key = newIdempotencyKey("dialog.answer");
		try {
			await operations.answerCheckpoint(runId, answerFromText(text, shape), waiting.requestId, key, SUBMIT_WAIT_MS);
			return { outcome: "answered", requestId: waiting.requestId };
		} catch (error) {
			if (!(error instanceof CommandRefusedError)) throw error;
			if (error.code === "validationRejected") {
				rejection = error.message;
				continue;
			}
			if (error.code === "requestClosed") return { outcome: "closed", requestId: waiting.requestId, reason: error.message };
			throw error;
		}
	}
}

/** The words for the person after a round of asking. */
export function askedText(runId: string, asked: Asked): { text: string; level: "info" | "warning" } {
	switch (asked.outcome) {
		case "answered":
			return { text: `Answered ${asked.requestId} of run ${runId}.`, level: "info" };
		case "dismissed":
			return {
				text: `No answer given; run ${runId} still waits on its question: /workflow answer ${runId} asks again.`,
				level: "warning",
			};
		case "closed":
			return { text: `The question of run ${runId} is closed: ${asked.reason}`, level: "warning" };
	}
}

/** What `QuestionDialogs` needs from the coordinator. */
export interface DialogHost {
	/** The UI to ask in, or undefined when no person can answer here. */
	ui(): Pick<ExtensionUIContext, "input"> | undefined;
	notify(message: string, level: "info" | "warning" | "error"): void;
}

/**
 * The dialogs the coordinator opens by itself: one for the session's active checkpoint for
 * the person, once per presentation in this Pi process, closed when that request is no longer
 * the active one (answered elsewhere, cancelled, timed out) or the session ends.
 */
export class QuestionDialogs {
	private readonly operations: WorkflowOperations;
	private readonly host: DialogHost;
	private readonly asked = new Set<string>();
	private open: { requestId: string; controller: AbortController } | undefined;

	constructor(operations: WorkflowOperations, host: DialogHost) {
		this.operations = operations;
		this.host = host;
	}

	/**
	 * Follow the session's active request: close a dialog for another request, and ask for
	 * `active` when it is a pending checkpoint for the person whose card is in the branch
	 * (`shown`) and it was not asked here yet.
	 */
	follow(active: ActiveRequest | null, shown: boolean): void {
		if (this.open && this.open.requestId !== active?.requestId) this.closeOpen();
		if (!active || !isPersonsCheckpoint(active) || active.status !== "pending" || !shown) return;
		// Once per presentation: a question presented again (its run resumed) is asked again.
		const presentation = active.workflowMessageId ?? active.requestId;
		if (this.asked.has(presentation) || this.open) return;
		const ui = this.host.ui();
		if (!ui) return;
		this.asked.add(presentation);
		const controller = new AbortController();
		const open = { requestId: active.requestId, controller };
		this.open = open;
		const runId = active.runId;
		askInDialog(ui, this.operations, runId, active.requestId, controller.signal).then(
			(asked) => {
				if (this.open === open) this.open = undefined;
				if (controller.signal.aborted) return; // closed because the request moved on
				const { text, level } = askedText(runId, asked);
				this.host.notify(`pi-workflows: ${text}`, level);
			},
			(error: unknown) => {
				if (this.open === open) this.open = undefined;
				if (controller.signal.aborted) return;
				this.host.notify(`pi-workflows: the answer to run ${runId}'s question was not sent: ${describeError(error)}; /workflow answer ${runId} asks again`, "error");
			},
		);
	}

	/** Close the open dialog, if any (the session ends). */
	close(): void {
		this.closeOpen();
	}

	private closeOpen(): void {
		const open = this.open;
		this.open = undefined;
		open?.controller.abort();
	}
}
