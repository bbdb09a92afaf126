/**
 * The session coordinator: the one place that presents a Pi session's workflow messages and
 * reports what the session shows and which model turns it ran.
 *
 * Owns the coordinator's connection (its own `WorkflowClient`, so a held submission on the
 * command connection never delays a report) and this state machine:
 *
 * - `connecting`: `session.attach` (a new coordinator epoch, which fences any older Pi process
 *   on the same session), then — before anything is sent — a report of the workflow messages
 *   already in the branch (`workflowMessage.report`, with `idle`), then `session.watch`.
 * - `live`: every pushed `session.view` is presented in order: a step or terminal result only
 *   while Pi is idle with nothing pending (checked synchronously right before
 *   `pi.sendMessage(..., {triggerTurn: true})`), a notification without a turn (also only
 *   while idle, so its entry is in the branch at once), a decision as a card the model never
 *   sees, a checkpoint for the person (`question`) as a card and a text dialog for the person
 *   (`questions.ts`), never a model turn. The branch is reported again once a sent entry
 *   shows up.
 *   Turns started by our messages are reported started and ended (`workflowTurn.report`, with
 *   the provider's error text when one ended with an error); an assistant-message step's
 *   final reply is submitted as its output (again, with the same key, from the branch when an
 *   earlier submission never reached the server).
 * - the tool limit: a step with `allowedTools` is presented only when this Pi can enforce the
 *   limit (else it is refused: not presented, its run paused, the reason shown); from its
 *   presentation until its request stops being the session's active request, Pi's `tool_call`
 *   hook asks `onToolCall`, which blocks every tool the step does not allow (`toollimit.ts`),
 *   and the allowed Pi tools the session has but had not turned on are on (`toolset.ts`:
 *   turned on right before the step is sent, off again once the limit is no longer in force
 *   and when the session ends; a restarted Pi turns off what an earlier one left on).
 * - a lost connection goes back to `connecting` after a short, growing delay (a restarted
 *   server gets a new attach); `fenced` (a newer coordinator attached) stops presenting for
 *   good; `closed` at `session_shutdown`.
 *
 * A view carries a long text cut (`textTruncated`): the message's whole text is read with
 * `workflowMessage.get` before it is presented, one message at a time and in order, so a
 * backlog of large notifications is presented whole, then the step after it. A
 * `session.unavailable` event (the server could not push the view) drops the view and
 * watches again after a growing delay, telling the person once per outage.
 *
 * Runs in the Pi process. A send is proven only by finding its id in the branch, so a send
 * not yet found is kept "in flight" and never repeated. Every timer, socket and Pi-event
 * callback here is guarded: a stale context throws in Pi 1.x and an uncaught throw exits Pi.
 */

import {
	type AgentEndEvent,
	type AgentSettledEvent,
	type BeforeAgentStartEvent,
	type ExtensionAPI,
	type ExtensionContext,
	type ToolCallEventResult,
	VERSION,
} from "@earendil-works/pi-coding-agent";

import { randomUUID } from "node:crypto";

import { newIdempotencyKey, type WorkflowClient } from "./client.ts";
import type { EventFrame, JsonObject } from "./connection.ts";
import {
	ClientClosedError,
	CommandRefusedError,
	ConnectionLostError,
	describeError,
	NO_MODEL_PREFIX,
	ServerNotRunningError,
	ServerStartError,
	ServerUnreachableError,
} from "./errors.ts";
import {
	type ActiveRequest,
	attachSession,
	type PresentMessage,
	readMessageText,
	type RunView,
	reportMessages,
	reportTurn,
	type SessionView,
	type StopReason,
	type ViewUnavailable,
	watchSession,
	type WorkflowMessage,
	type WorkflowOperations,
	DETACHED_SESSION_PREFIX,
} from "./operations.ts";
import { agentDir } from "./paths.ts";
import {
	closedText,
	contentOf,
	DECISION_ENTRY_TYPE,
	decisionCard,
	detailsOf,
	endedWithError,
	finalReplyText,
	findPresented,
	lastLimitInBranch,
	MESSAGE_TYPE,
	type MessageDetails,
	needsWholeText,
	presentedLimit,
	providerError,
	QUESTION_ENTRY_TYPE,
	questionCard,
	REFUSAL_ENTRY_TYPE,
	refusalCard,
	rejectionText,
	replyAfterStep,
	startsTurn,
	statusText,
	UI_KEY,
	widgetLines,
} from "./presentation.ts";
import {
	allowedToolsField,
	blockReason,
	enforcementProblem,
	mayBeLimited,
	parseAllowedTools,
	type StepTools,
	unavailableProblem,
	WORKFLOW_TOOL,
} from "./toollimit.ts";
import { StepToolset } from "./toolset.ts";
import { QuestionDialogs } from "./questions.ts";

/** The first delay before reconnecting; it doubles up to `RECONNECT_MAX_MS`. */
const RECONNECT_FIRST_MS = 100;
const RECONNECT_MAX_MS = 2000;

/** The most reports kept while the connection is down (turn reports; branch reports coalesce). */
const MAX_OUTBOX = 100;

/** The first delay before watching again after `session.unavailable`; it doubles up to `REWATCH_MAX_MS`. */
const REWATCH_FIRST_MS = 1000;
const REWATCH_MAX_MS = 30_000;

/** The status line shown once another Pi process presents this session. */
export const FENCED_STATUS = "workflows: another Pi process presents this session";

export type Phase = "connecting" | "live" | "fenced" | "closed";

/** A model turn started by one of our messages. */
interface OpenTurn {
	/** The workflow message the turn is for (a step or terminal result, or the step of a rejection note). */
	messageId: string | undefined;
	requestId: string | null;
	requestKind: string | null;
	runId: string;
	/** The messages of the turn's latest `agent_end`. */
	messages: readonly unknown[];
}

/** A rejected assistant-message reply, waiting to be shown to the model. */
interface Rejection {
	requestId: string;
	stepMessageId: string | undefined;
	runId: string;
	reason: string;
}

/** One report to send on the coordinator's connection, in order, with the current epoch. */
interface Outgoing {
	kind: "branch" | "turn";
	send: (epoch: number) => Promise<void>;
}

export interface CoordinatorOptions {
	/** Start a server on the first attach when nobody listens (the branch shows an origin session). */
	autostart: boolean;
}

export class SessionCoordinator {
	readonly sessionId: string;
	private readonly pi: ExtensionAPI;
	private readonly client: WorkflowClient;
	private readonly operations: WorkflowOperations;
	private readonly autostart: boolean;
	/** The Pi tools turned on for the step whose limit is in force. */
	private readonly toolset: StepToolset;
	/** The text dialog of the active checkpoint for the person. */
	private readonly questions: QuestionDialogs;

	/**
	 * This coordinator's seat incarnation: one per Pi process and session. The server
	 * records turns and deliveries with it, so a step whose turn died with an earlier Pi is
	 * presented again here, while this same Pi reconnecting after a server restart keeps its
	 * turn.
	 */
	readonly seatId = `pi:${randomUUID()}`;
	private ctx: ExtensionContext | undefined;
	private phaseValue: Phase = "connecting";
	private epoch = 0;
	private generation = 0;
	private view: SessionView | undefined;
	private revision = -1;
	private reconnectTimer: NodeJS.Timeout | undefined;
	private reconnectDelay = RECONNECT_FIRST_MS;
	private readonly outbox: Outgoing[] = [];
	private flushing = false;
	private pumping = false;
	/** Sent, not yet found in the branch: never sent again. */
	private readonly inFlight = new Set<string>();
	private turn: OpenTurn | undefined;
	private readonly rejections: Rejection[] = [];
	/** The tool limits of steps by request id, once read (from the view, else from `run.get`). */
	private readonly stepTools = new Map<string, StepTools | "reading">();
	/** The tool limit a step was sent with, by request id, until its entry is in the branch. */
	private readonly sentLimits = new Map<string, string[] | null>();
	/** Active requests this coordinator refused to present, until they stop being active. */
	private readonly refused = new Set<string>();
	/** The idempotency keys of assistant-message replies submitted (or being submitted) here. */
	private readonly submittedReplies = new Set<string>();
	/** Requests whose assistant-message reply is being submitted: their steps are not presented meanwhile. */
	private readonly replying = new Set<string>();
	private shownWidget = "";
	private shownStatus = "";
	/** Whole texts of messages the current view carries cut, by workflow message id. */
	private readonly wholeTexts = new Map<string, string>();
	/** The message whose whole text is being read (one at a time, in presentation order). */
	private reading: string | undefined;
	private rewatchTimer: NodeJS.Timeout | undefined;
	private rewatchDelay = REWATCH_FIRST_MS;
	/** The person was told the view is unavailable (once per outage). */
	private toldUnavailable = false;

	constructor(
		pi: ExtensionAPI,
		sessionId: string,
		client: WorkflowClient,
		operations: WorkflowOperations,
		options: CoordinatorOptions,
	) {
		this.pi = pi;
		this.sessionId = sessionId;
		this.client = client;
		this.operations = operations;
		this.autostart = options.autostart;
		this.toolset = new StepToolset(pi);
		this.questions = new QuestionDialogs(operations, {
			ui: () => {
				const ctx = this.ctx;
				// Nobody answers a dialog in a detached run's headless Pi: its server drives it.
				if (!ctx || !ctx.hasUI || sessionId.startsWith(DETACHED_SESSION_PREFIX)) return undefined;
				return ctx.ui;
			},
			notify: (message, level) => this.notify(message, level),
		});
		client.onEvent = (event) => this.guard(() => this.receive(event));
		client.onDisconnect = () => this.guard(() => this.lost());
	}

	/** Where the state machine is. */
	get phase(): Phase {
		return this.phaseValue;
	}

	/** `session_start`: remember the context and connect (attach, report, watch). */
	start(ctx: ExtensionContext): void {
		this.ctx = ctx;
		this.guard(() => this.toolset.adopt(this.branch()));
		this.syncTools();
		void this.connect(true);
	}

	/** Use the newest context Pi handed us (every event carries one). */
	touch(ctx: ExtensionContext): void {
		if (this.phaseValue !== "closed") this.ctx = ctx;
	}

	/** `session_shutdown`: stop presenting, close the connection and every timer. Idempotent. */
	stop(): void {
		if (this.phaseValue === "closed") return;
		this.phaseValue = "closed";
		this.generation++;
		if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
		this.reconnectTimer = undefined;
		this.clearRewatch();
		this.wholeTexts.clear();
		this.outbox.length = 0;
		this.guard(() => this.toolset.restore());
		this.guard(() => this.questions.close());
		this.ctx = undefined;
		this.client.close();
	}

	/** Send what the outbox holds while live, waiting at most `ms` (Pi is about to end the session). */
	async drain(ms: number): Promise<void> {
		const deadline = Date.now() + ms;
		while (this.phaseValue === "live" && this.outbox.length > 0 && Date.now() < deadline) {
			void this.flush();
			await new Promise<void>((resolve) => {
				setTimeout(resolve, 20);
			});
		}
	}

	/** Another connection to the server answered: reconnect now instead of after the delay. */
	nudge(): void {
		this.guard(() => {
			if (this.phaseValue !== "connecting" || !this.reconnectTimer) return;
			clearTimeout(this.reconnectTimer);
			this.reconnectTimer = undefined;
			void this.connect(false);
		});
	}

	// -- Pi events ---------------------------------------------------------------------

	/** `before_agent_start`: a run started by one of our messages is a turn for its step. */
	onBeforeAgentStart(event: BeforeAgentStartEvent): void {
		this.guard(() => {
			if (event.messageType !== "custom" || event.message.customType !== MESSAGE_TYPE) return;
			const details = event.message.details as MessageDetails | undefined;
			if (!details || typeof details !== "object") return;
			const messageId = details.workflowMessageId ?? details.stepMessageId;
			this.turn = {
				messageId,
				requestId: details.requestId ?? null,
				requestKind: details.requestKind ?? null,
				runId: details.runId,
				messages: [],
			};
			this.send("turn", (epoch) =>
				reportTurn(this.client, this.sessionId, epoch, "started", messageId ? { workflowMessageId: messageId } : {}).then(
					() => undefined,
				),
			);
		});
	}

	/**
	 * `tool_call`: block a call of a tool the step in force does not allow; the model sees the
	 * reason as the call's error. Not guarded on purpose: Pi blocks a call whose hook throws.
	 */
	onToolCall(toolName: string): ToolCallEventResult | undefined {
		const limit = this.toolLimit();
		if (!limit || toolName === WORKFLOW_TOOL || limit.tools.includes(toolName)) return undefined;
		return { block: true, reason: blockReason(limit.requestId, limit.tools, toolName) };
	}

	/**
	 * The tool limit in force now, if any: that of the session's active request once its step
	 * is presented in this branch (or sent and not yet there). Before the server's first view
	 * after an attach, that of the latest step in the branch, unless its run's result followed.
	 */
	toolLimit(): { requestId: string; tools: string[] } | undefined {
		if (this.phaseValue === "closed") return undefined;
		const branch = this.branch();
		const turnStep = this.turn?.requestId;
		if (turnStep) {
			// A turn a step started keeps that step's limit until it ends, whatever request the
			// session's view makes active meanwhile (another run resumed, the step answered).
			const own = presentedLimit(branch, turnStep) ?? this.sentLimits.get(turnStep);
			if (own) return { requestId: turnStep, tools: own };
		}
		const view = this.view;
		if (!view) return lastLimitInBranch(branch);
		const active = view.activeRequest;
		if (!active || !mayBeLimited(active.kind)) return undefined;
		const presented = presentedLimit(branch, active.requestId);
		const tools = presented !== undefined ? presented : this.sentLimits.get(active.requestId);
		return tools ? { requestId: active.requestId, tools } : undefined;
	}

	/** `message_start`, `message_end`, `turn_end`: a sent entry may be in the branch now. */
	onProgress(): void {
		this.guard(() => {
			if (this.inFlight.size === 0) return;
			if (this.collectPresent()) this.reportBranch();
		});
	}

	/** `agent_end`: keep the turn's messages (its final reply is the last assistant message). */
	onAgentEnd(event: AgentEndEvent): void {
		this.guard(() => {
			if (this.turn) this.turn.messages = event.messages;
		});
	}

	/** `agent_settled`: end our turn, prove what was sent, and present what is next. */
	onAgentSettled(event: AgentSettledEvent): void {
		this.guard(() => {
			const turn = this.turn;
			this.turn = undefined;
			if (turn) {
				const stopReason: StopReason = event.aborted ? "aborted" : endedWithError(turn.messages) ? "error" : "completed";
				const errorMessage = stopReason === "error" ? providerError(turn.messages, agentDir()) : "";
				this.send("turn", (epoch) =>
					reportTurn(this.client, this.sessionId, epoch, "ended", { stopReason, errorMessage }).then((body) =>
						this.afterTurn(turn, errorMessage, body),
					),
				);
				if (turn.requestKind === "assistant" && turn.requestId && stopReason === "completed") {
					const reply = replyAfterStep(this.branch(), turn.requestId);
					const text = reply ? reply.text : finalReplyText(turn.messages);
					this.submitReply(turn.requestId, turn.runId, turn.messageId, text, reply?.entryId);
				}
			}
			// Pi settled: whatever was sent before now is in the branch, or was lost.
			this.collectPresent();
			this.inFlight.clear();
			this.reportBranch();
			this.pump();
		});
	}

	/**
	 * Tell the person, in one line, what became of a step whose turn ended with a provider
	 * error (the server presents it again after a backoff, or paused its run). Pi's own line
	 * for a missing model is "Unknown provider: unknown": the error says what is missing.
	 */
	private afterTurn(turn: OpenTurn, errorMessage: string, body: JsonObject): void {
		this.guard(() => {
			if (!errorMessage && turn.requestKind === null) return;
			const retry = body.retry;
			const step = turn.requestId ? `step ${turn.requestId} of run ${turn.runId}` : `run ${turn.runId}`;
			const cause = errorMessage || "the model provider failed";
			if (retry && typeof retry === "object" && !Array.isArray(retry)) {
				const at = typeof retry.retryAt === "number" ? retry.retryAt : Date.now();
				const seconds = Math.max(0, Math.round((at - Date.now()) / 1000));
				this.notify(
					`pi-workflows: the model's turn on ${step} failed (${cause}); it is presented again in ${seconds} s (retry ${String(retry.retry)} of ${String(retry.of)})`,
					"warning",
				);
			} else if (typeof body.paused === "string") {
				const run = body.paused;
				this.notify(
					`pi-workflows: the workflow step's turn failed: ${cause}; run ${run} is paused (agentUnavailable): /workflow resume ${run} once it is fixed`,
					"error",
				);
			} else if (errorMessage.startsWith(NO_MODEL_PREFIX)) {
				this.notify(`pi-workflows: the workflow step's turn failed: ${errorMessage}`, "error");
			}
		});
	}

	/** `session_tree`: the branch changed; report it again (a missing step comes back once). */
	onTree(): void {
		this.guard(() => {
			this.reportBranch();
			this.pump();
		});
	}

	// -- connecting --------------------------------------------------------------------

	private async connect(first: boolean): Promise<void> {
		const generation = ++this.generation;
		this.phaseValue = "connecting";
		const stale = () => generation !== this.generation || this.phaseValue !== "connecting";
		try {
			const epoch = await attachSession(this.client, this.sessionId, first && this.autostart, this.seatId);
			if (stale()) return;
			this.epoch = epoch;
			this.view = undefined;
			this.revision = -1;
			this.clearRewatch();
			// Turn reports made while away go first: an idle branch report tells the server
			// that every turn this Pi ran was reported (an open one is then lost).
			await this.flushTurns(epoch);
			if (stale()) return;
			// Before anything is sent: what this session already shows.
			const idle = this.isIdle() && !this.outbox.some((item) => item.kind === "turn");
			await reportMessages(this.client, this.sessionId, epoch, this.branchPresent(), idle);
			if (stale()) return;
			await watchSession(this.client, this.sessionId, epoch);
			if (stale()) return;
			this.phaseValue = "live";
			this.reconnectDelay = RECONNECT_FIRST_MS;
			void this.flush();
			this.guard(() => this.pump());
		} catch (error) {
			if (stale()) return;
			if (isFenced(error)) {
				this.fence();
				return;
			}
			if (error instanceof ClientClosedError) return;
			this.scheduleReconnect();
		}
	}

	private lost(): void {
		if (this.phaseValue !== "live" && this.phaseValue !== "connecting") return;
		this.phaseValue = "connecting";
		this.generation++;
		this.scheduleReconnect();
	}

	private scheduleReconnect(): void {
		if (this.reconnectTimer || this.phaseValue !== "connecting") return;
		const delay = this.reconnectDelay;
		this.reconnectDelay = Math.min(delay * 2, RECONNECT_MAX_MS);
		this.reconnectTimer = setTimeout(() => {
			this.reconnectTimer = undefined;
			this.guard(() => {
				if (this.phaseValue === "connecting") void this.connect(false);
			});
		}, delay);
	}

	private fence(): void {
		if (this.phaseValue === "closed" || this.phaseValue === "fenced") return;
		this.phaseValue = "fenced";
		this.generation++;
		if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
		this.reconnectTimer = undefined;
		this.outbox.length = 0;
		this.view = undefined;
		this.clearRewatch();
		this.wholeTexts.clear();
		this.showUi(undefined, FENCED_STATUS);
		this.client.close();
	}

	// -- the server's pushes -----------------------------------------------------------

	private receive(event: EventFrame): void {
		const payload = event.payload;
		if (!payload || payload.sessionId !== this.sessionId) return;
		if (event.name === "session.fenced") {
			if (typeof payload.coordinatorEpoch === "number" && payload.coordinatorEpoch !== this.epoch) this.fence();
			return;
		}
		if (event.name === "session.unavailable") {
			if (payload.coordinatorEpoch === this.epoch) this.unavailable(payload as unknown as ViewUnavailable);
			return;
		}
		if (event.name !== "session.view") return;
		const view = payload as unknown as SessionView;
		if (view.coordinatorEpoch !== this.epoch || typeof view.revision !== "number" || view.revision <= this.revision) return;
		this.revision = view.revision;
		this.view = view;
		this.rewatchDelay = REWATCH_FIRST_MS;
		this.toldUnavailable = false;
		const listed = new Set(view.messages.map((message) => message.workflowMessageId));
		for (const id of [...this.wholeTexts.keys()]) if (!listed.has(id)) this.wholeTexts.delete(id);
		this.showUi(widgetLines(view), statusText(view));
		this.pump();
	}

	/** `session.unavailable`: the server ended the watch; present nothing until it is back. */
	private unavailable(info: ViewUnavailable): void {
		if (this.phaseValue !== "live") return;
		this.view = undefined;
		if (!this.toldUnavailable) {
			this.toldUnavailable = true;
			const reason = typeof info.message === "string" ? info.message : "the server could not push it";
			this.notify(`pi-workflows: this session's workflow view is unavailable (${reason}); trying again`);
		}
		this.scheduleRewatch(info.retryAfterMs);
	}

	/** Watch again after the server's `retryAfterMs`, or the growing delay if that is longer. */
	private scheduleRewatch(retryAfterMs: unknown): void {
		if (this.rewatchTimer || this.phaseValue !== "live") return;
		const floor = typeof retryAfterMs === "number" && retryAfterMs > 0 ? retryAfterMs : REWATCH_FIRST_MS;
		const delay = Math.min(Math.max(floor, this.rewatchDelay), REWATCH_MAX_MS);
		this.rewatchDelay = Math.min(delay * 2, REWATCH_MAX_MS);
		const generation = this.generation;
		this.rewatchTimer = setTimeout(() => {
			this.rewatchTimer = undefined;
			this.guard(() => {
				if (generation === this.generation && this.phaseValue === "live") void this.rewatch(generation);
			});
		}, delay);
	}

	private async rewatch(generation: number): Promise<void> {
		try {
			await watchSession(this.client, this.sessionId, this.epoch);
		} catch (error) {
			this.guard(() => {
				if (generation !== this.generation || this.phaseValue !== "live") return;
				if (isFenced(error)) this.fence();
				else if (!isConnectionFailure(error)) this.scheduleRewatch(undefined); // a lost connection attaches and watches anew
			});
		}
	}

	private clearRewatch(): void {
		if (this.rewatchTimer) clearTimeout(this.rewatchTimer);
		this.rewatchTimer = undefined;
		this.rewatchDelay = REWATCH_FIRST_MS;
	}

	// -- presenting --------------------------------------------------------------------

	/** Present what the view asks for now, in order, stopping at the first that must wait. */
	private pump(): void {
		this.syncTools();
		if (this.phaseValue !== "live" || this.pumping) return;
		const ctx = this.ctx;
		const view = this.view;
		if (!ctx || !view) return;
		this.pumping = true;
		let report = false;
		try {
			this.forgetInactive(view.activeRequest);
			this.retryReply(ctx, view.activeRequest);
			const present = new Set(this.branchPresent().map((item) => item.workflowMessageId));
			// A note for a step that is no longer active would ask for a reply nobody takes.
			while (this.rejections[0] && this.rejections[0].requestId !== view.activeRequest?.requestId) {
				this.rejections.shift();
			}
			const rejection = this.rejections[0];
			if (rejection) {
				if (!this.canStartTurn(ctx)) return;
				this.rejections.shift();
				this.sendRejection(rejection);
				return;
			}
			for (const message of view.messages) {
				const id = message.workflowMessageId;
				if (present.has(id)) {
					report = true; // shown already: the server learns it from the report
					continue;
				}
				if (this.inFlight.has(id)) {
					if (startsTurn(message)) break;
					continue;
				}
				// A text the view carries cut is read whole first; presenting goes on, in order, once it is here.
				const text = this.textOf(message);
				if (text === undefined) break;
				if (message.kind === "decision") {
					this.pi.appendEntry(DECISION_ENTRY_TYPE, decisionCard(message, text));
					report = true;
					continue;
				}
				if (message.kind === "question") {
					// A checkpoint for the person: a card (and a dialog, below), never a model turn.
					this.pi.appendEntry(QUESTION_ENTRY_TYPE, questionCard(message, text));
					report = true;
					continue;
				}
				if (message.kind === "notification") {
					// Only while idle: then the entry is in the branch at once (and proven).
					if (!this.canStartTurn(ctx)) break;
					this.inFlight.add(id);
					this.pi.sendMessage(this.customMessage(message, null, text), { triggerTurn: false });
					report = true;
					continue;
				}
				if (!startsTurn(message)) continue;
				// A reply of this step is being submitted: present it again only if that fails.
				if (message.kind === "step" && this.replying.has(String(message.body.requestId))) break;
				const limit = message.kind === "step" ? this.limitFor(message, view.activeRequest) : null;
				if (limit === "wait") break; // its tool limit is being read; pumped again then
				if (limit === "refused") continue; // not presented: its run is paused
				// Re-checked synchronously right before the send: idle, nothing pending.
				if (!this.canStartTurn(ctx)) break;
				const requestId = message.body.requestId;
				if (typeof requestId === "string" && message.kind === "step") {
					this.sentLimits.set(requestId, limit);
					// The allowed tools the session has but had not turned on are on for the step's turn.
					const missing = limit ? this.syncTools() : [];
					if (missing.length > 0 && view.activeRequest) {
						this.sentLimits.delete(requestId);
						this.refuse(view.activeRequest, unavailableProblem(missing));
						this.syncTools();
						continue;
					}
				}
				this.inFlight.add(id);
				this.pi.sendMessage(this.customMessage(message, limit, text), { triggerTurn: true });
				report = true;
				break;
			}
		} finally {
			this.pumping = false;
			if (report) {
				this.collectPresent();
				this.reportBranch();
			}
			this.guard(() => this.followQuestion(view.activeRequest));
		}
	}

	/** Offer the dialog of the active checkpoint for the person once its card is in the branch. */
	private followQuestion(active: ActiveRequest | null): void {
		const messageId = active?.workflowMessageId;
		const shown = !!messageId && this.branchPresent().some((item) => item.workflowMessageId === messageId);
		this.questions.follow(active, shown);
	}

	private customMessage(message: WorkflowMessage, allowedTools: string[] | null = null, text: string = message.text) {
		const details: MessageDetails = detailsOf(message);
		if (allowedTools) details.allowedTools = allowedTools;
		return {
			customType: MESSAGE_TYPE,
			content: contentOf(message, text),
			display: true,
			details,
		};
	}

	/** The whole text of `message`, or undefined while it is being read (the read is started here). */
	private textOf(message: WorkflowMessage): string | undefined {
		if (!needsWholeText(message)) return message.text;
		const whole = this.wholeTexts.get(message.workflowMessageId);
		if (whole !== undefined) return whole;
		this.readWhole(message);
		return undefined;
	}

	/** Read `message`'s whole text, then present again; one read at a time. */
	private readWhole(message: WorkflowMessage): void {
		if (this.reading !== undefined) return;
		const id = message.workflowMessageId;
		const generation = this.generation;
		this.reading = id;
		const done = (text: string | undefined) =>
			this.guard(() => {
				if (this.reading === id) this.reading = undefined;
				if (generation !== this.generation || this.phaseValue !== "live") return;
				if (text !== undefined) this.wholeTexts.set(id, text);
				this.pump();
			});
		readMessageText(this.client, id).then(done, (error: unknown) => {
			// A lost connection attaches again and reads it then; a refusal (the message was
			// pruned) presents what the view carries, saying that the rest could not be read.
			done(isConnectionFailure(error) ? undefined : cutNote(message, describeError(error)));
		});
	}

	// -- the tool limit ----------------------------------------------------------------

	/**
	 * The tool limit to present a step with (`null`: none), `"wait"` while it is read, or
	 * `"refused"` when this Pi cannot enforce it (the step is then refused, once while active).
	 */
	private limitFor(message: WorkflowMessage, active: ActiveRequest | null): string[] | null | "wait" | "refused" {
		const requestId = message.body.requestId;
		if (typeof requestId !== "string" || !mayBeLimited(String(message.body.requestKind))) return null;
		if (this.refused.has(requestId)) return "refused";
		if (!active || active.requestId !== requestId) return "wait";
		const tools = this.readTools(active);
		if (tools === undefined) return "wait";
		if (tools.kind === "none") return null;
		const problem =
			tools.kind === "unreadable" ? tools.reason : enforcementProblem(tools.tools, this.knownTools(), VERSION);
		if (problem === undefined && tools.kind === "limit") return tools.tools;
		this.refuse(active, problem ?? "the step's tool limit cannot be enforced");
		return "refused";
	}

	/**
	 * The step's tool limit: from the view if its active request carries `allowedTools`, else
	 * read once from the run (`run.get`; the session view carries no request body).
	 */
	private readTools(active: ActiveRequest): StepTools | undefined {
		const known = this.stepTools.get(active.requestId);
		if (known === "reading") return undefined;
		if (known) return known;
		const field = allowedToolsField(active);
		if (field !== undefined) {
			const tools = parseAllowedTools(field);
			this.stepTools.set(active.requestId, tools);
			return tools;
		}
		this.stepTools.set(active.requestId, "reading");
		void this.readToolsOfRun(active.runId, active.requestId);
		return undefined;
	}

	/** Read a step's tool limit from its run (`waitingOn.request.allowedTools`), then present again. */
	private async readToolsOfRun(runId: string, requestId: string): Promise<void> {
		let tools: StepTools | undefined;
		try {
			const receipt = await this.client.call({ operation: "run.get", runId, autostart: false });
			const run = (receipt.body.run ?? {}) as unknown as RunView;
			if (run.waitingOn?.requestId === requestId) tools = parseAllowedTools(allowedToolsField(run.waitingOn.request));
		} catch (error) {
			// A refusal is final for this step; a lost connection is read again after the reattach.
			if (error instanceof CommandRefusedError) {
				tools = { kind: "unreadable", reason: `its tool limit could not be read: ${describeError(error)}` };
			}
		}
		this.guard(() => {
			if (this.stepTools.get(requestId) !== "reading") return;
			if (tools) this.stepTools.set(requestId, tools);
			else this.stepTools.delete(requestId); // the run moved on, or the server went away
			if (tools) this.pump();
		});
	}

	/** The names of every tool this Pi has (active or not); empty when Pi cannot say. */
	private knownTools(): Set<string> {
		try {
			return new Set(this.pi.getAllTools().map((tool) => tool.name));
		} catch {
			return new Set();
		}
	}

	/**
	 * Make the session's active tools follow the limit in force (`toolset.ts`); returns the
	 * limit's tools that are still not active (empty when Pi could not be asked).
	 */
	private syncTools(): string[] {
		try {
			return this.toolset.sync(this.toolLimit());
		} catch {
			return []; // the session ended under us: its next start turns off what is left
		}
	}

	/** Refuse to present the active step: say why (a card and an error), and pause its run. */
	private refuse(active: ActiveRequest, reason: string): void {
		this.refused.add(active.requestId);
		const card = refusalCard(active.runId, active.requestId, active.nodeId, reason);
		this.guard(() => this.pi.appendEntry(REFUSAL_ENTRY_TYPE, card));
		this.notify(card.text, "error");
		const key = newIdempotencyKey(`refuse.${active.requestId}`);
		this.operations.control("pause", active.runId, key, `the Pi session refused its step: ${reason}`).then(
			() => undefined,
			(error: unknown) =>
				this.guard(() => {
					// Not paused for want of a server: refused (and paused) again once it is back.
					if (isConnectionFailure(error) || error instanceof ServerStartError) this.refused.delete(active.requestId);
				}),
		);
	}

	/** Forget what this coordinator kept about requests that are no longer the active one. */
	private forgetInactive(active: ActiveRequest | null): void {
		const current = active?.requestId;
		for (const map of [this.stepTools, this.sentLimits]) {
			for (const requestId of map.keys()) if (requestId !== current) map.delete(requestId);
		}
		for (const requestId of this.refused) if (requestId !== current) this.refused.delete(requestId);
	}

	private canStartTurn(ctx: ExtensionContext): boolean {
		return this.turn === undefined && ctx.isIdle() && !ctx.hasPendingMessages();
	}

	private sendRejection(rejection: Rejection): void {
		const details: MessageDetails = {
			runId: rejection.runId,
			requestId: rejection.requestId,
			kind: "rejection",
			requestKind: "assistant",
			...(rejection.stepMessageId ? { stepMessageId: rejection.stepMessageId } : {}),
		};
		this.pi.sendMessage(
			{ customType: MESSAGE_TYPE, content: rejectionText(rejection.requestId, rejection.reason), display: true, details },
			{ triggerTurn: true },
		);
	}

	/**
	 * Submit the final visible reply of an assistant-message step's turn as its output. The
	 * key is derived from the request and the reply's entry, so submitting the same reply again
	 * (after a reattach, from another Pi process) adopts the first submission.
	 */
	private submitReply(
		requestId: string,
		runId: string,
		stepMessageId: string | undefined,
		text: string,
		entryId: string | undefined,
	): void {
		const key = entryId ? replyKey(requestId, entryId) : newIdempotencyKey(`assistant.${requestId}`);
		if (this.submittedReplies.has(key)) return;
		this.submittedReplies.add(key);
		this.replying.add(requestId);
		const settled = () =>
			this.guard(() => {
				this.replying.delete(requestId);
				this.pump();
			});
		this.operations.submit(requestId, text, undefined, key).then(
			() => settled(),
			(error: unknown) =>
				this.guard(() => {
					settled();
					if (this.phaseValue === "closed") return;
					if (error instanceof CommandRefusedError && error.code === "validationRejected") {
						this.rejections.push({ requestId, stepMessageId, runId, reason: error.message });
						this.pump();
						return;
					}
					if (error instanceof CommandRefusedError && error.code === "requestClosed") {
						this.sendClosed(requestId, runId, error.message);
						return;
					}
					// The server was away: the reply stays in the branch and is submitted on reattach.
					const retry = isConnectionFailure(error) || error instanceof ServerStartError;
					if (retry) this.submittedReplies.delete(key);
					const later = retry ? "; it is submitted when the server is back" : "";
					this.notify(`pi-workflows: the reply for ${requestId} was not submitted: ${describeError(error)}${later}`);
				}),
		);
	}

	/**
	 * An assistant-message step's reply that is in the branch but was never taken (Pi ended, or
	 * the server was unreachable, before the submission): submit it now, with its reply's key.
	 */
	private retryReply(ctx: ExtensionContext, active: ActiveRequest | null): void {
		if (!active || active.kind !== "assistant" || active.status !== "pending") return;
		if (this.turn !== undefined || !ctx.isIdle()) return;
		const reply = replyAfterStep(this.branch(), active.requestId);
		if (!reply) return;
		this.submitReply(active.requestId, active.runId, active.workflowMessageId ?? undefined, reply.text, reply.entryId);
	}

	/** Tell the model (without a turn) that the step it replied to is closed: no reply is taken. */
	private sendClosed(requestId: string, runId: string, reason: string): void {
		const details: MessageDetails = { runId, requestId, kind: "closed", requestKind: "assistant" };
		this.pi.sendMessage(
			{ customType: MESSAGE_TYPE, content: closedText(requestId, reason), display: true, details },
			{ triggerTurn: false },
		);
	}

	// -- reporting ---------------------------------------------------------------------

	/** The workflow messages in the current branch ([] when the context is gone). */
	private branchPresent(): PresentMessage[] {
		return findPresented(this.branch());
	}

	/** The session's current branch ([] when the context is gone). */
	private branch(): readonly unknown[] {
		const ctx = this.ctx;
		if (!ctx) return [];
		try {
			return ctx.sessionManager.getBranch();
		} catch {
			return []; // a stale context: the session ended under us
		}
	}

	/** Drop in-flight sends that are now in the branch; true if any was found. */
	private collectPresent(): boolean {
		if (this.inFlight.size === 0) return false;
		let found = false;
		for (const item of this.branchPresent()) {
			if (this.inFlight.delete(item.workflowMessageId)) found = true;
		}
		return found;
	}

	/** True when Pi is idle, nothing is pending and nothing we sent is unaccounted for. */
	private isIdle(): boolean {
		const ctx = this.ctx;
		if (!ctx || this.inFlight.size > 0 || this.turn !== undefined) return false;
		try {
			return ctx.isIdle() && !ctx.hasPendingMessages();
		} catch {
			return false;
		}
	}

	/**
	 * Report the branch (computed when the report is sent); a report queued last coalesces
	 * with this one. `idle` tells the server that every turn this Pi ran was reported (a turn
	 * of it still open ended unreported, and a step no turn works on is presented again), so
	 * it is claimed only when no turn report waits in the outbox behind this one.
	 */
	private reportBranch(): void {
		if (this.outbox[this.outbox.length - 1]?.kind === "branch") return;
		this.send("branch", async (epoch) => {
			const idle = this.isIdle() && !this.outbox.some((item) => item.kind === "turn");
			await reportMessages(this.client, this.sessionId, epoch, this.branchPresent(), idle);
		});
	}

	private send(kind: Outgoing["kind"], send: Outgoing["send"]): void {
		if (this.phaseValue === "closed" || this.phaseValue === "fenced") return;
		this.outbox.push({ kind, send });
		if (this.outbox.length > MAX_OUTBOX) this.outbox.shift();
		void this.flush();
	}

	/**
	 * On a new connection, before the first branch report: send the turn reports queued while
	 * the connection was down, in order (a lost connection throws, and they stay queued).
	 */
	private async flushTurns(epoch: number): Promise<void> {
		// Queued branch reports are superseded by the report that follows on this connection.
		for (let i = this.outbox.length - 1; i >= 0; i--) if (this.outbox[i]?.kind === "branch") this.outbox.splice(i, 1);
		while (this.outbox[0]?.kind === "turn") {
			const item = this.outbox[0];
			try {
				await item.send(epoch);
			} catch (error) {
				if (isFenced(error) || isConnectionFailure(error)) throw error;
				// Refused as it is: sending it again cannot help.
			}
			if (this.outbox[0] === item) this.outbox.shift();
		}
	}

	/** Send queued reports in order while live; a lost connection keeps them for the next one. */
	private async flush(): Promise<void> {
		if (this.flushing) return;
		this.flushing = true;
		try {
			while (this.phaseValue === "live" && this.outbox.length > 0) {
				const item = this.outbox[0];
				if (!item) break;
				try {
					await item.send(this.epoch);
					this.outbox.shift();
				} catch (error) {
					if (isFenced(error)) {
						this.fence();
						return;
					}
					if (isConnectionFailure(error)) return; // kept: the next connection sends it
					this.outbox.shift(); // refused as it is: sending it again cannot help
				}
			}
		} finally {
			this.flushing = false;
		}
	}

	// -- the UI ------------------------------------------------------------------------

	/** Show the widget and the status line (only what changed); never throws. */
	private showUi(lines: string[] | undefined, status: string | undefined): void {
		this.guard(() => {
			const ctx = this.ctx;
			if (!ctx || !ctx.hasUI) return;
			const widget = lines ? lines.join("\n") : "";
			if (widget !== this.shownWidget) {
				this.shownWidget = widget;
				ctx.ui.setWidget(UI_KEY, lines);
			}
			const line = status ?? "";
			if (line !== this.shownStatus) {
				this.shownStatus = line;
				ctx.ui.setStatus(UI_KEY, status);
			}
		});
	}

	/** A warning (or an error) for the person; never throws. */
	private notify(message: string, level: "info" | "warning" | "error" = "warning"): void {
		this.guard(() => {
			const ctx = this.ctx;
			if (ctx?.hasUI) ctx.ui.notify(message, level);
		});
	}

	/** Run a callback so that nothing it throws (a stale context, a refused send) escapes. */
	private guard(body: () => void): void {
		try {
			body();
		} catch {
			// The session ended under us, or Pi refused the call: nothing more to do here.
		}
	}
}

/** The connection, not the report, failed: the report is sent again on the next connection. */
function isConnectionFailure(error: unknown): boolean {
	return (
		error instanceof ConnectionLostError ||
		error instanceof ServerNotRunningError ||
		error instanceof ServerUnreachableError ||
		error instanceof ClientClosedError
	);
}

/** The idempotency key of submitting the reply in entry `entryId` for `requestId` (the same in every Pi process). */
function replyKey(requestId: string, entryId: string): string {
	return `pi:assistant:${requestId}:${entryId}`.replace(/[^A-Za-z0-9_.:-]/g, "_").slice(0, 200);
}

function isFenced(error: unknown): boolean {
	return error instanceof CommandRefusedError && error.code === "coordinatorFenced";
}

/** A cut text whose rest could not be read, with a note that says so. */
function cutNote(message: WorkflowMessage, reason: string): string {
	const missing = Math.max(0, message.textBytes - Buffer.byteLength(message.text, "utf8"));
	return `${message.text}\n[the remaining ${missing} bytes of this workflow message could not be read: ${reason}]`;
}
