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
 *   sees. The branch is reported again once a sent entry shows up.
 *   Turns started by our messages are reported started and ended (`workflowTurn.report`, with
 *   the provider's error text when one ended with an error); an assistant-message step's
 *   final reply is submitted as its output.
 * - a lost connection goes back to `connecting` after a short, growing delay (a restarted
 *   server gets a new attach); `fenced` (a newer coordinator attached) stops presenting for
 *   good; `closed` at `session_shutdown`.
 *
 * Runs in the Pi process. A send is proven only by finding its id in the branch, so a send
 * not yet found is kept "in flight" and never repeated. Every timer, socket and Pi-event
 * callback here is guarded: a stale context throws in Pi 1.x and an uncaught throw exits Pi.
 */

import type {
	AgentEndEvent,
	AgentSettledEvent,
	BeforeAgentStartEvent,
	ExtensionAPI,
	ExtensionContext,
} from "@earendil-works/pi-coding-agent";

import { newIdempotencyKey, type WorkflowClient } from "./client.ts";
import type { EventFrame } from "./connection.ts";
import {
	ClientClosedError,
	CommandRefusedError,
	ConnectionLostError,
	describeError,
	ServerNotRunningError,
	ServerUnreachableError,
} from "./errors.ts";
import {
	attachSession,
	type PresentMessage,
	reportMessages,
	reportTurn,
	type SessionView,
	type StopReason,
	watchSession,
	type WorkflowMessage,
	type WorkflowOperations,
} from "./operations.ts";
import {
	contentOf,
	DECISION_ENTRY_TYPE,
	decisionCard,
	detailsOf,
	endedWithError,
	finalReplyText,
	findPresented,
	MESSAGE_TYPE,
	type MessageDetails,
	providerError,
	rejectionText,
	startsTurn,
	statusText,
	UI_KEY,
	widgetLines,
} from "./presentation.ts";

/** The first delay before reconnecting; it doubles up to `RECONNECT_MAX_MS`. */
const RECONNECT_FIRST_MS = 100;
const RECONNECT_MAX_MS = 2000;

/** The most reports kept while the connection is down (turn reports; branch reports coalesce). */
const MAX_OUTBOX = 100;

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
	private shownWidget = "";
	private shownStatus = "";

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
		this.outbox.length = 0;
		this.ctx = undefined;
		this.client.close();
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
				const errorMessage = stopReason === "error" ? providerError(turn.messages) : "";
				this.send("turn", (epoch) =>
					reportTurn(this.client, this.sessionId, epoch, "ended", { stopReason, errorMessage }).then(() => undefined),
				);
				if (turn.requestKind === "assistant" && turn.requestId && stopReason === "completed") {
					this.submitReply(turn, turn.requestId, finalReplyText(turn.messages));
				}
			}
			// Pi settled: whatever was sent before now is in the branch, or was lost.
			this.collectPresent();
			this.inFlight.clear();
			this.reportBranch();
			this.pump();
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
			const epoch = await attachSession(this.client, this.sessionId, first && this.autostart);
			if (stale()) return;
			this.epoch = epoch;
			this.view = undefined;
			this.revision = -1;
			// Before anything is sent: what this session already shows.
			await reportMessages(this.client, this.sessionId, epoch, this.branchPresent(), this.isIdle());
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
		if (event.name !== "session.view") return;
		const view = payload as unknown as SessionView;
		if (view.coordinatorEpoch !== this.epoch || typeof view.revision !== "number" || view.revision <= this.revision) return;
		this.revision = view.revision;
		this.view = view;
		this.showUi(widgetLines(view), statusText(view));
		this.pump();
	}

	// -- presenting --------------------------------------------------------------------

	/** Present what the view asks for now, in order, stopping at the first that must wait. */
	private pump(): void {
		if (this.phaseValue !== "live" || this.pumping) return;
		const ctx = this.ctx;
		const view = this.view;
		if (!ctx || !view) return;
		this.pumping = true;
		let report = false;
		try {
			const present = new Set(this.branchPresent().map((item) => item.workflowMessageId));
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
				if (message.kind === "decision") {
					this.pi.appendEntry(DECISION_ENTRY_TYPE, decisionCard(message));
					report = true;
					continue;
				}
				if (message.kind === "notification") {
					// Only while idle: then the entry is in the branch at once (and proven).
					if (!this.canStartTurn(ctx)) break;
					this.inFlight.add(id);
					this.pi.sendMessage(this.customMessage(message), { triggerTurn: false });
					report = true;
					continue;
				}
				if (!startsTurn(message)) continue;
				// Re-checked synchronously right before the send: idle, nothing pending.
				if (!this.canStartTurn(ctx)) break;
				this.inFlight.add(id);
				this.pi.sendMessage(this.customMessage(message), { triggerTurn: true });
				report = true;
				break;
			}
		} finally {
			this.pumping = false;
			if (report) {
				this.collectPresent();
				this.reportBranch();
			}
		}
	}

	private customMessage(message: WorkflowMessage) {
		return {
			customType: MESSAGE_TYPE,
			content: contentOf(message),
			display: true,
			details: detailsOf(message),
		};
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

	/** Submit the final visible reply of an assistant-message step's turn as its output. */
	private submitReply(turn: OpenTurn, requestId: string, text: string): void {
		const key = newIdempotencyKey(`assistant.${requestId}`);
		this.operations.submit(requestId, text, undefined, key).then(
			() => undefined,
			(error: unknown) =>
				this.guard(() => {
					if (this.phaseValue === "closed") return;
					if (error instanceof CommandRefusedError && error.code === "validationRejected") {
						this.rejections.push({ requestId, stepMessageId: turn.messageId, runId: turn.runId, reason: error.message });
						this.pump();
						return;
					}
					// Answered meanwhile (the model also used the tool, or it timed out): nothing to do.
					if (error instanceof CommandRefusedError && error.code === "requestClosed") return;
					this.notify(`pi-workflows: the reply for ${requestId} was not submitted: ${describeError(error)}`);
				}),
		);
	}

	// -- reporting ---------------------------------------------------------------------

	/** The workflow messages in the current branch ([] when the context is gone). */
	private branchPresent(): PresentMessage[] {
		const ctx = this.ctx;
		if (!ctx) return [];
		try {
			return findPresented(ctx.sessionManager.getBranch());
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

	/** Report the branch (computed when the report is sent); queued reports coalesce. */
	private reportBranch(): void {
		if (this.outbox.some((item) => item.kind === "branch")) return;
		this.send("branch", async (epoch) => {
			await reportMessages(this.client, this.sessionId, epoch, this.branchPresent(), this.isIdle());
		});
	}

	private send(kind: Outgoing["kind"], send: Outgoing["send"]): void {
		if (this.phaseValue === "closed" || this.phaseValue === "fenced") return;
		this.outbox.push({ kind, send });
		if (this.outbox.length > MAX_OUTBOX) this.outbox.shift();
		void this.flush();
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

	/** A warning for the person; never throws. */
	private notify(message: string): void {
		this.guard(() => {
			const ctx = this.ctx;
			if (ctx?.hasUI) ctx.ui.notify(message, "warning");
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

function isFenced(error: unknown): boolean {
	return error instanceof CommandRefusedError && error.code === "coordinatorFenced";
}
