/**
 * The extension's client of the pi-workflows server: one logical command in, one receipt out,
 * with durable retries.
 *
 * Owns the session's connection (opened at `session_start`, closed at `session_shutdown`),
 * reconnecting on demand, starting a server through the CLI when nobody listens, and retrying
 * a command whose connection was lost: each retry has a new `requestId` and the same
 * `clientId`, `idempotencyKey` and payload, so the server applies it at most once and answers
 * a retry of a committed command with its stored receipt (`adopted`). Runs in the Pi process.
 * It never opens the database, never runs workflow code and never touches a Pi context; no
 * timer or socket callback it owns can throw.
 */

import { randomUUID } from "node:crypto";

import { startServer } from "./autostart.ts";
import {
	ClientClosedError,
	CommandRefusedError,
	ConnectionLostError,
	ServerNotRunningError,
	WorkflowError,
} from "./errors.ts";
import {
	CLIENT_SCHEMA,
	Connection,
	type EventFrame,
	type JsonObject,
	type RequestFrame,
	type ResponseFrame,
} from "./connection.ts";

/**
 * Operations without an idempotency key: reads, which store nothing, and the session
 * coordinator's watch and reports, which are idempotent facts and store no receipt.
 */
export const READ_OPERATIONS: ReadonlySet<string> = new Set([
	"server.status",
	"workflows.list",
	"run.list",
	"run.get",
	"effect.list",
	"state.diagnose",
	"interaction.list",
	"session.get",
	"session.watch",
	"workflowMessage.get",
	"workflowMessage.report",
	"workflowTurn.report",
]);

/** Retries of one logical command after its connection was lost (so at most 4 sends). */
export const MAX_RETRIES = 3;

const RETRY_BACKOFF_MS = [50, 250, 1000];

/** The result of a command the server accepted (now) or adopted (a retry of a committed one). */
export interface Receipt {
	operation: string;
	outcome: "accepted" | "adopted";
	revision: number | null;
	body: JsonObject;
	idempotencyKey: string | null;
}

/** One logical command: its retries all share `idempotencyKey`. */
export interface CommandSpec {
	operation: string;
	payload?: JsonObject;
	runId?: string;
	/** Required for state-changing operations; keep it for every retry of the same command. */
	idempotencyKey?: string;
	/** Start a server when nobody listens (default: the client's `autostart`). */
	autostart?: boolean;
}

export interface ClientOptions {
	/** The server's socket. */
	socketPath: string;
	/** The `pi-workflows` executable that starts a server. */
	cli: string;
	/** Stable for this client; with an idempotency key it names one logical command. */
	clientId: string;
	/** Start a server through the CLI when nobody listens (default true). */
	autostart?: boolean;
	/** How long to wait for one reply (default 30 s). */
	requestTimeoutMs?: number;
	/** How long to wait for a connection's hello (default 10 s). */
	connectTimeoutMs?: number;
}

/** A fresh idempotency key for one logical command; `label` says where it came from. */
export function newIdempotencyKey(label: string): string {
	const safe = label.replace(/[^A-Za-z0-9_.:-]/g, "_").slice(0, 80);
	return `pi:${safe}:${randomUUID()}`;
}

export class WorkflowClient {
	readonly clientId: string;
	/** Called (guarded) for every event the server pushes on the current connection. */
	onEvent: ((event: EventFrame) => void) | undefined;
	/** Called (guarded) when a connection has received the server's hello. */
	onConnect: (() => void) | undefined;
	/**
	 * Called (guarded) when a connection that had received its hello ends while the client is
	 * open: what the server knew about that connection (a session watch) is gone.
	 */
	onDisconnect: ((reason: Error) => void) | undefined;

	private readonly options: Required<Omit<ClientOptions, "clientId">>;
	private connection: Connection | undefined;
	private starting: Promise<void> | undefined;
	private closed = false;
	/** Pending retry delays: their timers and how to end them early (at `close`). */
	private readonly sleeps = new Map<NodeJS.Timeout, () => void>();

	constructor(options: ClientOptions) {
		this.clientId = options.clientId;
		this.options = {
			socketPath: options.socketPath,
			cli: options.cli,
			autostart: options.autostart ?? true,
			requestTimeoutMs: options.requestTimeoutMs ?? 30_000,
			connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
		};
	}

	/** True after `close`. */
	get isClosed(): boolean {
		return this.closed;
	}

	/**
	 * Begin connecting now, without starting a server (a warm connection for the first
	 * command). Failures are silent: the first command reconnects and starts a server if needed.
	 */
	connectInBackground(): void {
		if (this.closed) return;
		this.current();
	}

	/**
	 * Send one command and resolve with its receipt.
	 *
	 * Rejects with `CommandRefusedError` (the server's one-line message) when the server
	 * refuses, `ConnectionLostError` when every attempt lost its connection,
	 * `ServerStartError` when no server could be started, `ClientClosedError` after `close`, or
	 * another `WorkflowError`.
	 */
	async call(spec: CommandSpec): Promise<Receipt> {
		const payload = spec.payload ?? {};
		const key = spec.idempotencyKey ?? (READ_OPERATIONS.has(spec.operation) ? null : newIdempotencyKey(spec.operation));
		let lost: Error | undefined;
		let startedServer = false;
		for (let attempt = 0; attempt <= MAX_RETRIES; attempt++) {
			if (this.closed) throw new ClientClosedError();
			if (attempt > 0 && lost instanceof ConnectionLostError) {
				await this.sleep(RETRY_BACKOFF_MS[Math.min(attempt - 1, RETRY_BACKOFF_MS.length - 1)] ?? 1000);
			}
			const request: RequestFrame = {
				type: "request",
				schema: CLIENT_SCHEMA,
				requestId: `req-${randomUUID()}`,
				clientId: this.clientId,
				operation: spec.operation,
				idempotencyKey: key,
				runId: spec.runId ?? null,
				expectedRevision: null,
				payload,
			};
			let response: ResponseFrame;
			try {
				response = await this.current().exchange(request, this.options.requestTimeoutMs);
			} catch (error) {
				if (this.closed) throw new ClientClosedError();
				const autostart = spec.autostart ?? this.options.autostart;
				if (error instanceof ServerNotRunningError && autostart && !startedServer) {
					startedServer = true;
					await this.startServer();
					lost = error;
					continue;
				}
				if (error instanceof ConnectionLostError) {
					lost = error;
					continue;
				}
				throw error;
			}
			return toReceipt(spec.operation, key, response);
		}
		throw lost instanceof WorkflowError
			? new ConnectionLostError(`${spec.operation}: ${lost.message} (after ${MAX_RETRIES + 1} attempts)`)
			: new ConnectionLostError(`${spec.operation}: the connection was lost on every attempt`);
	}

	/** Close the connection and stop every timer; outstanding calls reject. Idempotent. */
	close(): void {
		if (this.closed) return;
		this.closed = true;
		// End every pending retry delay now; its call then sees `closed` and rejects.
		const sleeps = [...this.sleeps];
		this.sleeps.clear();
		for (const [timer, wake] of sleeps) {
			clearTimeout(timer);
			wake();
		}
		const connection = this.connection;
		this.connection = undefined;
		connection?.close(new ClientClosedError());
	}

	// -- internals ---------------------------------------------------------------------

	/** The open connection, or a new one (its requests queue until the hello). */
	private current(): Connection {
		const existing = this.connection;
		if (existing && !existing.closed) return existing;
		const connection = new Connection(this.options.socketPath, this.options.connectTimeoutMs);
		connection.onEvent = (event) => {
			const handler = this.onEvent;
			if (handler && !this.closed) handler(event);
		};
		connection.onClose = (reason) => {
			if (this.connection === connection) this.connection = undefined;
			if (connection.serverHello === undefined || this.closed) return;
			const handler = this.onDisconnect;
			if (handler) guarded(() => handler(reason));
		};
		this.connection = connection.closed ? undefined : connection;
		connection.ready.then(
			() => {
				const handler = this.onConnect;
				if (handler && !this.closed) guarded(handler);
			},
			() => undefined,
		);
		return connection;
	}

	/** Start a server once for all concurrent callers; resolves when one answers. */
	private startServer(): Promise<void> {
		if (!this.starting) {
			const started = startServer(this.options.cli).finally(() => {
				if (this.starting === started) this.starting = undefined;
			});
			this.starting = started;
		}
		return this.starting;
	}

	/** A delay the client owns: ends after `ms`, or at once at `close`; never rejects. */
	private sleep(ms: number): Promise<void> {
		return new Promise<void>((resolve) => {
			const timer = setTimeout(() => {
				this.sleeps.delete(timer);
				resolve();
			}, ms);
			this.sleeps.set(timer, resolve);
		});
	}
}

/** Run a callback so that nothing it throws reaches the socket or timer that called it. */
function guarded(body: () => void): void {
	try {
		body();
	} catch {
		// The callback's failure is its own; the connection goes on.
	}
}

function toReceipt(operation: string, key: string | null, response: ResponseFrame): Receipt {
	if (response.outcome === "accepted" || response.outcome === "adopted") {
		return {
			operation,
			outcome: response.outcome,
			revision: response.revision ?? null,
			body: response.receipt ?? {},
			idempotencyKey: key,
		};
	}
	const code = response.error?.code ?? response.outcome;
	const message = response.error?.message ?? `${operation} was answered ${response.outcome}`;
	throw new CommandRefusedError(message, operation, response.outcome, code);
}
