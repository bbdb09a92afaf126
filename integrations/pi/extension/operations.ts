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
import { WorkflowError } from "./errors.ts";

/** One workflow a run can start (`workflows.list`). */
export interface WorkflowInfo {
	name: string;
	origin: string;
	path: string;
	/** The first line of the file's docstring, if it has one. */
	summary?: string | null;
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
	/** Only a person answers it: a human decision, or a checkpoint for the person. */
	forPerson?: boolean;
	request: JsonValue;
}

/** A run's durable wait (a sleep, a retry delay, an event wait): it holds no runner. */
export interface DurableWait {
	kind: string;
	nodeId: string;
	event?: string | null;
	dueAt?: number | null;
	/** One line for people: what the run waits for. */
	text: string;
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
	wait?: DurableWait | null;
	/** The run's newest `publish_update` value (its attempt's latest), or null. */
	progress?: RunProgress | null;
	input?: JsonValue;
	output?: JsonValue;
	error?: JsonValue;
	/** The Pi session that presents it (`detached-<run id>` for a detached run). */
	originSession?: string | null;
	/** Its managed effects (`kind`: `idempotent` or `manual`): the newest ones, and how many older are left out. */
	effects?: { effectId: string; kind: string; nodeId: string; status: string }[];
	effectsOmitted?: number;
	/** The child runs it started (`subworkflow`, `fan_out`), one entry per join. */
	joins?: { total?: number }[];
	/** Where it came from and what came from it (`lineage.kind`: `fork`, `child` or `root`). */
	lineage?: { kind: string; parentRunId?: string | null; forks?: { runId: string; status: string }[] } | null;
}

/** What `run.fork` needs besides the source run. */
export interface ForkSpec {
	fromNode: string;
	visit?: number;
	/** A new input; undefined keeps the source's. */
	input?: JsonValue;
	/** The Pi session that presents the fork (its origin). */
	originSession: string;
	/** Run the fork detached instead (a headless Pi the server runs). */
	detached?: boolean;
}

/** A node's latest progress (`ctx.publish_update`): the value as one line, when it came. */
export interface RunProgress {
	nodeId: string;
	/** The value as one line (a string value as it is, else its JSON), at most 200 characters. */
	text: string;
	at: number;
	/** How many values the node published (the server keeps only the latest). */
	published: number;
}

/**
 * The variables a run records from the process that starts it, when they are set, besides
 * every `LC_*` one (docs/authoring.md, "Environment"): the same rule as the Python clients'
 * `pi_workflows.protocol.environment`, so a run started from Pi gets Pi's `PATH`, `HOME`,
 * language and time zone, never the server's environment.
 */
export const DEFAULT_VARIABLES: readonly string[] = [
	"HOME",
	"LANG",
	"LANGUAGE",
	"LOGNAME",
	"PATH",
	"SHELL",
	"TERM",
	"TMPDIR",
	"TZ",
	"USER",
	"VIRTUAL_ENV",
];

/** The environment `run.start` records from `env` (default this Pi's): the default variables. */
export function recordedEnvironment(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
	const recorded: Record<string, string> = {};
	for (const [name, value] of Object.entries(env)) {
		if (value === undefined || name.startsWith("PI_WORKFLOWS_")) continue;
		if (DEFAULT_VARIABLES.includes(name) || name.startsWith("LC_")) recorded[name] = value;
	}
	return recorded;
}

/** What `run.start` needs. */
export interface StartSpec {
	workflow: string;
	input: JsonValue;
	/** Absolute; the server looks for project workflows in `<projectDir>/.pi/workflows`. */
	projectDir: string;
	/** The Pi session the run is started from (its origin, which presents its steps). */
	originSession: string;
	/**
	 * Run it detached instead: the server presents its steps to a headless Pi of its own, on
	 * the session `detached-<run id>`, and the run has no origin session here.
	 */
	detached?: boolean;
}

/** The waiting request kind only a person may answer (the tool refuses it). */
export const DECISION_KIND = "decision";

/** The request kind of a checkpoint (ordinary, or for the person: `forPerson`). */
export const CHECKPOINT_KIND = "checkpoint";

/** How the session of a detached run's headless Pi is named (`detached-<run id>`): nobody answers dialogs there. */
export const DETACHED_SESSION_PREFIX = "detached-";

/** True for a waiting request only a person answers that is not a decision: a checkpoint for the person. */
export function isPersonsCheckpoint(request: { kind: string; forPerson?: boolean } | null | undefined): boolean {
	return !!request && request.kind === CHECKPOINT_KIND && request.forPerson === true;
}

/** How long a submission may stay `validating` before the caller is told so. */
export const SUBMIT_WAIT_MS = 120_000;

/** The pause between asking again for a submission that is still validating. */
const SUBMIT_POLL_MS = 200;

/** A parent run's progress through the join it waits on (a `subworkflow` or `fan_out` node). */
export interface ChildProgress {
	waitId: string;
	nodeId: string;
	/** `subworkflow` or `fan_out`. */
	kind: string;
	/** The child workflow's name. */
	workflow: string;
	total: number;
	started: number;
	ended: number;
	failed: number;
	/** `running`, `failing`, `joined` or `cancelled`. */
	status: string;
	/** True when each child runs on a headless Pi of its own (not in this session). */
	detached: boolean;
}

/** One of the session's runs, as the session view lists it (root runs before child runs). */
export interface SessionRun {
	runId: string;
	workflow: string;
	status: string;
	parkReason?: string | null;
	currentNode?: string | null;
	/** The run this one is a child run of, or null for a root run. */
	parentRunId?: string | null;
	/** For a parent waiting on a join: its children's progress, else null. */
	children?: ChildProgress | null;
	/** The latest `publish_update` value of the node it runs now, else null. */
	progress?: RunProgress | null;
}

/**
 * The session's one active request, as the session view shows it. It carries no text: the
 * step's text is its message's (`workflowMessageId`) in `SessionView.messages`.
 */
export interface ActiveRequest {
	requestId: string;
	runId: string;
	nodeId: string;
	kind: string;
	status: string;
	/** A decision's title (at most 200 characters), else null. */
	title: string | null;
	/** Only a person answers it: a human decision, or a checkpoint for the person. */
	forPerson?: boolean;
	/** The tools an agent step allows (`allowed_tools`), or null: no limit (or not an agent step). */
	allowedTools: JsonValue;
	deadlineAt: number | null;
	workflowMessageId: string | null;
	messageStatus: string | null;
	lastRejection: string | null;
}

/**
 * One workflow message the session must add: `step` (a model turn), `decision` (a human
 * decision's card), `question` (a checkpoint for the person: a card and a dialog),
 * `notification`, `terminal` or `followUp` (a follow-up prompt).
 */
export interface WorkflowMessage {
	workflowMessageId: string;
	runId: string;
	kind: string;
	/** The message's other fields; never its text. */
	body: JsonObject;
	/** The message's text: its first 64 KiB when `textTruncated` (read the whole with `readMessageText`). */
	text: string;
	/** The whole text's size in UTF-8 bytes. */
	textBytes: number;
	textTruncated: boolean;
	status: string;
	resumed: boolean;
	createdAt: number;
}

/** What the server pushes to the session's coordinator (`session.view`). */
export interface SessionView {
	sessionId: string;
	coordinatorEpoch: number | null;
	revision: number;
	activeRequest: ActiveRequest | null;
	/** The oldest messages to add, as many as fit the view's byte bound. */
	messages: WorkflowMessage[];
	/** How many messages to add follow the listed ones (they come once those are reported). */
	moreMessages: number;
	runs: SessionRun[];
}

/** Why the server stopped pushing the session's view (`session.unavailable`). */
export interface ViewUnavailable {
	sessionId: string;
	code: string;
	message: string;
	retryAfterMs: number;
}

/** One workflow message found in the session's branch, with the entry that holds it. */
export interface PresentMessage {
	workflowMessageId: string;
	entryId: string;
}

/** How a model turn ended, for `workflowTurn.report`. */
export type StopReason = "completed" | "aborted" | "error" | "lost";

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

	/**
	 * `run.start`; the receipt holds `runId`, `workflow`, `originSession` and `revision`. A
	 * detached run is sent with `detached: true` and without `originSession` (the server
	 * refuses both together). The run records this Pi's default variables
	 * (`recordedEnvironment`) and works in the project directory.
	 */
	startRun(spec: StartSpec, idempotencyKey: string): Promise<Receipt> {
		const payload: JsonObject = {
			workflow: spec.workflow,
			input: spec.input,
			projectDir: spec.projectDir,
			environment: recordedEnvironment(),
			workingDirectory: spec.projectDir,
		};
		if (spec.detached) payload.detached = true;
		else payload.originSession = spec.originSession;
		return this.client.call({ operation: "run.start", payload, idempotencyKey });
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

	/** `run.pause`, `run.resume` or `run.cancel` (a pause's or a cancellation's reason is kept). */
	control(action: "pause" | "resume" | "cancel", runId: string, idempotencyKey: string, reason?: string): Promise<Receipt> {
		const payload: JsonObject = action !== "resume" && reason ? { reason: reason.slice(0, 1000) } : {};
		return this.client.call({ operation: `run.${action}`, runId, payload, idempotencyKey });
	}

	/** `run.restart`: run it again from its start (a fork: its fork point) in a new round. */
	restart(runId: string, idempotencyKey: string): Promise<Receipt> {
		return this.client.call({ operation: "run.restart", runId, payload: {}, idempotencyKey });
	}

	/**
	 * `run.fork`: a new run at `fromNode` of `runId` on the workflow's current code; the
	 * receipt names the fork (`runId`), what it carried and the effects ahead of it.
	 */
	fork(runId: string, spec: ForkSpec, idempotencyKey: string): Promise<Receipt> {
		const payload: JsonObject = { fromNode: spec.fromNode };
		if (spec.visit !== undefined) payload.visit = spec.visit;
		if (spec.input !== undefined) payload.input = spec.input;
		if (spec.detached) payload.detached = true;
		else payload.originSession = spec.originSession;
		return this.client.call({ operation: "run.fork", runId, payload, idempotencyKey });
	}

	/** `run.upgrade`: continue a parked run on the workflow's current code (`dryRun`: only the plan). */
	upgrade(runId: string, dryRun: boolean, idempotencyKey: string): Promise<Receipt> {
		const payload: JsonObject = dryRun ? { dryRun: true } : {};
		return this.client.call({ operation: "run.upgrade", runId, payload, idempotencyKey });
	}

	/** `run.settings`: the run's live settings (`settings`, `change`, `changedBy`, `history`). */
	async settings(runId: string): Promise<JsonObject> {
		const receipt = await this.client.call({ operation: "run.settings", runId });
		return receipt.body;
	}

	/**
	 * `run.changeSettings`: apply the RFC 6902 JSON Patch `patch` to the run's settings as its
	 * next change, as the person or (`changedBy: "model"`, the tool) the model; `expectChange`
	 * refuses it unless the settings are still at that change number.
	 */
	changeSettings(
		runId: string,
		patch: JsonValue,
		changedBy: "person" | "model",
		expectChange: number | undefined,
		idempotencyKey: string,
	): Promise<Receipt> {
		const payload: JsonObject = { patch, changedBy };
		if (expectChange !== undefined) payload.expectChange = expectChange;
		return this.client.call({ operation: "run.changeSettings", runId, payload, idempotencyKey });
	}

	/** `run.followUp`: queue `text` as the run's next follow-up prompt (sent after it completes). */
	followUp(runId: string, text: string, idempotencyKey: string): Promise<Receipt> {
		return this.client.call({ operation: "run.followUp", runId, payload: { text }, idempotencyKey });
	}

	/** The runs of session `sessionId` (`session.get`): root runs first. */
	async sessionRuns(sessionId: string): Promise<SessionRun[]> {
		const receipt = await this.client.call({ operation: "session.get", payload: { sessionId } });
		const view = (receipt.body.session ?? {}) as JsonObject;
		return asArray(view.runs) as unknown as SessionRun[];
	}

	/** `run.followUps`: the run's follow-ups in queue order. */
	async followUps(runId: string): Promise<JsonObject> {
		const receipt = await this.client.call({ operation: "run.followUps", runId });
		return receipt.body;
	}

	/** `run.removeFollowUp`: remove a follow-up that is still queued. */
	removeFollowUp(followUpId: string, idempotencyKey: string): Promise<Receipt> {
		return this.client.call({ operation: "run.removeFollowUp", payload: { followUpId }, idempotencyKey });
	}

	/**
	 * `checkpoint.answer`: answer the run's checkpoint with `value`. With `waitMs`, while the
	 * answer is still `validating` it asks again (same key and payload) until that long has
	 * passed, as `submit` does; a rejection is the server's refusal (`validationRejected`).
	 */
	async answerCheckpoint(
		runId: string,
		value: JsonValue,
		requestId: string | undefined,
		idempotencyKey: string,
		waitMs: number = 0,
	): Promise<Receipt> {
		const payload: JsonObject = { value };
		if (requestId) payload.requestId = requestId;
		const until = Date.now() + waitMs;
		for (;;) {
			const receipt = await this.client.call({ operation: "checkpoint.answer", runId, payload, idempotencyKey });
			if (receipt.body.status !== "validating" || Date.now() >= until || this.client.isClosed) return receipt;
			await delay(SUBMIT_POLL_MS);
		}
	}

	/** `decision.answer`: a person's choice in the run's human decision. */
	answerDecision(runId: string, choice: string, requestId: string | undefined, idempotencyKey: string): Promise<Receipt> {
		const payload: JsonObject = { choice };
		if (requestId) payload.requestId = requestId;
		return this.client.call({ operation: "decision.answer", runId, payload, idempotencyKey });
	}

	/**
	 * `interaction.submit`: the output of a step, for the request `requestId`. Resolves once
	 * the submission is accepted, or after `waitMs` still validating (the receipt says
	 * `status: "validating"`); rejects with the server's refusal, e.g. `validationRejected`
	 * with the exact validation message. Every ask uses the same key and payload.
	 */
	async submit(
		requestId: string,
		output: JsonValue,
		runId: string | undefined,
		idempotencyKey: string,
		waitMs: number = SUBMIT_WAIT_MS,
	): Promise<Receipt> {
		const until = Date.now() + waitMs;
		for (;;) {
			const receipt = await this.client.call({
				operation: "interaction.submit",
				payload: { requestId, output },
				...(runId ? { runId } : {}),
				idempotencyKey,
			});
			if (receipt.body.status !== "validating" || Date.now() >= until || this.client.isClosed) return receipt;
			await delay(SUBMIT_POLL_MS);
		}
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

/** `session.attach`: become the session's coordinator; resolves with the coordinator epoch. */
export async function attachSession(
	client: WorkflowClient,
	sessionId: string,
	autostart: boolean,
	seatId: string,
): Promise<number> {
	const receipt = await client.call({ operation: "session.attach", payload: { sessionId, seatId }, autostart });
	const epoch = receipt.body.coordinatorEpoch;
	if (typeof epoch !== "number") throw new WorkflowError("session.attach answered without a coordinator epoch");
	return epoch;
}

/** `session.watch`: the server pushes `session.view` events on this client's connection. */
export async function watchSession(client: WorkflowClient, sessionId: string, epoch: number): Promise<void> {
	await client.call({
		operation: "session.watch",
		payload: { sessionId, coordinatorEpoch: epoch },
		autostart: false,
	});
}

/**
 * `workflowMessage.get`, slice after slice: the whole text of a workflow message whose view
 * carries it cut. Rejects with the server's refusal (e.g. `notFound`), or with a
 * `WorkflowError` when the slices do not add up to the announced size.
 */
export async function readMessageText(client: WorkflowClient, workflowMessageId: string): Promise<string> {
	const parts: string[] = [];
	let offset: number | null = 0;
	let total = 0;
	while (offset !== null) {
		const receipt: Receipt = await client.call({
			operation: "workflowMessage.get",
			payload: { workflowMessageId, offset },
			autostart: false,
		});
		const body = receipt.body;
		if (typeof body.text !== "string" || typeof body.textBytes !== "number") {
			throw new WorkflowError(`workflowMessage.get answered without the text of ${workflowMessageId}`);
		}
		parts.push(body.text);
		total = body.textBytes;
		const next: JsonValue | undefined = body.next;
		offset = typeof next === "number" && next > offset ? next : null;
	}
	const text = parts.join("");
	if (Buffer.byteLength(text, "utf8") !== total) {
		throw new WorkflowError(`the text of workflow message ${workflowMessageId} does not match its size`);
	}
	return text;
}

/** `workflowMessage.report`: the workflow messages in the session's branch; `{sent, resumed}`. */
export async function reportMessages(
	client: WorkflowClient,
	sessionId: string,
	epoch: number,
	present: PresentMessage[],
	idle: boolean,
): Promise<JsonObject> {
	const receipt = await client.call({
		operation: "workflowMessage.report",
		payload: {
			sessionId,
			coordinatorEpoch: epoch,
			present: present.map((item) => ({ workflowMessageId: item.workflowMessageId, entryId: item.entryId })),
			idle,
		},
		autostart: false,
	});
	return receipt.body;
}

/** How much of a provider's error text a turn report carries. */
export const MAX_TURN_ERROR_CHARS = 500;

/**
 * `workflowTurn.report`: a model turn started (for `workflowMessageId`) or ended (with
 * `stopReason`, and for `error` the provider's error text as Pi reported it, if any).
 */
export async function reportTurn(
	client: WorkflowClient,
	sessionId: string,
	epoch: number,
	event: "started" | "ended",
	detail: { stopReason?: StopReason; workflowMessageId?: string; errorMessage?: string },
): Promise<JsonObject> {
	const payload: JsonObject = { sessionId, coordinatorEpoch: epoch, event };
	if (detail.stopReason) payload.stopReason = detail.stopReason;
	if (detail.errorMessage) payload.errorMessage = detail.errorMessage.slice(0, MAX_TURN_ERROR_CHARS);
	if (detail.workflowMessageId) payload.workflowMessageId = detail.workflowMessageId;
	const receipt = await client.call({ operation: "workflowTurn.report", payload, autostart: false });
	return receipt.body;
}

/** A pause that ends after `ms`; its timer callback cannot throw. */
function delay(ms: number): Promise<void> {
	return new Promise<void>((resolve) => {
		setTimeout(resolve, ms);
	});
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
