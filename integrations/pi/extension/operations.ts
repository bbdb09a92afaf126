/**
 * The client-protocol operations the command and the tool use, with the shapes of their
 * results (docs/protocol.md), over one `WorkflowClient`.
 *
 * Owns building each operation's payload. Every state-changing method takes the idempotency
 * key of its logical command from the caller, so a caller that retries keeps the same key.
 * Runs in the Pi process; it never opens the database and never runs workflow code.
 */

import type { Receipt, WorkflowClient } from "./client.ts";
import type { JsonObject, JsonValue } from "./connection.ts";

/** One workflow a run can start (`workflows.list`). */
export interface WorkflowInfo {
	name: string;
	origin: string;
	path: string;
	error?: string | null;
}

/** One run in `run.list`. */
export interface RunSummary {
	runId: string;
	workflow: string;
	status: string;
	parkReason?: string | null;
	currentNode?: string | null;
	revision?: number;
	updatedAt?: number;
}

/** One choice of a human decision (`waitingOn.request.choices`). */
export interface DecisionChoice {
	id: string;
	label: string;
	description?: string | null;
}

/** What a waiting run waits on. */
export interface WaitingOn {
	requestId: string;
	nodeId: string;
	kind: string;
	request: JsonValue;
}

/** The parts of a `RunView` the extension reads. */
export interface RunView {
	runId: string;
	workflow: string;
	status: string;
	parkReason?: string | null;
	parkDetail?: JsonValue;
	revision?: number;
	currentNode?: string | null;
	waitingOn?: WaitingOn | null;
	input?: JsonValue;
	output?: JsonValue;
	error?: JsonValue;
}

/** What `run.start` needs. */
export interface StartSpec {
	workflow: string;
	input: JsonValue;
	/** Absolute; the server looks for project workflows in `<projectDir>/.pi/workflows`. */
	projectDir: string;
	/** The Pi session the run is started from. */
	originSession: string;
}

/** The waiting request kind only a person may answer (the tool refuses it). */
export const DECISION_KIND = "decision";

export class WorkflowOperations {
	private readonly client: WorkflowClient;

	constructor(client: WorkflowClient) {
		this.client = client;
	}

	/** `workflows.list` from `projectDir`. */
	async listWorkflows(projectDir: string): Promise<WorkflowInfo[]> {
		const receipt = await this.client.call({ operation: "workflows.list", payload: { projectDir } });
		return asArray(receipt.body.workflows) as unknown as WorkflowInfo[];
	}

	/** `run.start`; the receipt holds `runId`, `workflow` and `revision`. */
	startRun(spec: StartSpec, idempotencyKey: string): Promise<Receipt> {
		return this.client.call({
			operation: "run.start",
			payload: {
				workflow: spec.workflow,
				input: spec.input,
				projectDir: spec.projectDir,
				originSession: spec.originSession,
			},
			idempotencyKey,
		});
	}

	/** `run.list`, newest first. */
	async listRuns(limit: number): Promise<RunSummary[]> {
		const receipt = await this.client.call({ operation: "run.list", payload: { limit } });
		return asArray(receipt.body.runs) as unknown as RunSummary[];
	}

	/** `run.get`: the run's view. */
	async getRun(runId: string): Promise<RunView> {
		const receipt = await this.client.call({ operation: "run.get", runId });
		return (receipt.body.run ?? {}) as unknown as RunView;
	}

	/** `run.pause`, `run.resume` or `run.cancel` (with an optional reason). */
	control(action: "pause" | "resume" | "cancel", runId: string, idempotencyKey: string, reason?: string): Promise<Receipt> {
		const payload: JsonObject = action === "cancel" && reason ? { reason } : {};
		return this.client.call({ operation: `run.${action}`, runId, payload, idempotencyKey });
	}

	/** `checkpoint.answer`: answer the run's ordinary checkpoint with `value`. */
	answerCheckpoint(runId: string, value: JsonValue, requestId: string | undefined, idempotencyKey: string): Promise<Receipt> {
		const payload: JsonObject = { value };
		if (requestId) payload.requestId = requestId;
		return this.client.call({ operation: "checkpoint.answer", runId, payload, idempotencyKey });
	}

	/** `decision.answer`: a person's choice in the run's human decision. */
	answerDecision(runId: string, choice: string, requestId: string | undefined, idempotencyKey: string): Promise<Receipt> {
		const payload: JsonObject = { choice };
		if (requestId) payload.requestId = requestId;
		return this.client.call({ operation: "decision.answer", runId, payload, idempotencyKey });
	}

	/** `interaction.submit`: the output of an agent step, for the request `requestId`. */
	submit(requestId: string, output: JsonValue, runId: string | undefined, idempotencyKey: string): Promise<Receipt> {
		return this.client.call({
			operation: "interaction.submit",
			payload: { requestId, output },
			...(runId ? { runId } : {}),
			idempotencyKey,
		});
	}

	/** `interaction.update`: a progress update for the agent step `requestId`. */
	update(requestId: string, body: JsonValue, runId: string | undefined, idempotencyKey: string): Promise<Receipt> {
		return this.client.call({
			operation: "interaction.update",
			payload: { requestId, body },
			...(runId ? { runId } : {}),
			idempotencyKey,
		});
	}
}

/** The choices of a decision request, or [] when the request has none. */
export function decisionChoices(waiting: WaitingOn | null | undefined): DecisionChoice[] {
	const request = waiting?.request;
	if (!request || typeof request !== "object" || Array.isArray(request)) return [];
	const choices = request.choices;
	if (!Array.isArray(choices)) return [];
	const found: DecisionChoice[] = [];
	for (const item of choices) {
		if (!item || typeof item !== "object" || Array.isArray(item)) continue;
		const id = item.id;
		if (typeof id !== "string") continue;
		const label = typeof item.label === "string" ? item.label : id;
		const description = typeof item.description === "string" ? item.description : null;
		found.push({ id, label, description });
	}
	return found;
}

function asArray(value: JsonValue | undefined): JsonValue[] {
	return Array.isArray(value) ? value : [];
}
