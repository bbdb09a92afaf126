/**
 * One connection to the server's Unix socket, speaking client protocol v1: newline-delimited
 * JSON, at most 1 MiB a frame, the server's `hello` first.
 *
 * Owns one `node:net` socket: connecting, checking the hello, queueing outgoing frames until
 * the hello has arrived, matching responses to requests by `requestId`, and a reply deadline
 * per request. Runs in the Pi process. It never retries, reconnects or starts a server (that is
 * `client.ts`), never touches a Pi context, and no socket or timer callback can throw: every
 * failure becomes a rejected promise that a caller awaits, or the connection's close.
 */

import { createConnection, type Socket } from "node:net";

import {
	ConnectionLostError,
	ProtocolMismatchError,
	ServerNotRunningError,
	ServerUnreachableError,
	WorkflowError,
} from "./errors.ts";
import { MAX_SOCKET_PATH_BYTES } from "./paths.ts";

/** The `schema` of client protocol v1. */
export const CLIENT_SCHEMA = "pi-workflows.client.v1";

/** The protocol version this extension speaks. */
export const PROTOCOL_VERSION = 1;

/** The largest frame either side may send, including its newline. */
export const MAX_FRAME_BYTES = 1024 * 1024;

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };
export type JsonObject = { [key: string]: JsonValue };

/** The server's greeting. */
export interface Hello {
	type: "hello";
	schema: string;
	serverVersion: string;
	protocolVersion: number;
	serverEpoch: number;
	serverPid: number;
}

/** One request frame (the envelope of docs/protocol.md). */
export interface RequestFrame {
	type: "request";
	schema: typeof CLIENT_SCHEMA;
	requestId: string;
	clientId: string;
	operation: string;
	idempotencyKey: string | null;
	runId: string | null;
	expectedRevision: number | null;
	payload: JsonObject;
}

/** One response frame. */
export interface ResponseFrame {
	type: "response";
	requestId: string;
	outcome: string;
	revision?: number | null;
	receipt?: JsonObject | null;
	error?: { code: string; message: string } | null;
}

/** A message the server pushes without a request. */
export interface EventFrame {
	type: "event";
	name: string;
	runId?: string | null;
	payload?: JsonObject;
}

/** Thrown for a request that exceeds the frame cap; nothing was sent, the connection stays. */
export class RequestTooLargeError extends WorkflowError {}

interface Waiter {
	resolve: (response: ResponseFrame) => void;
	reject: (error: Error) => void;
	timer: NodeJS.Timeout;
}

const NO_LISTENER = new Set(["ENOENT", "ECONNREFUSED"]);

/**
 * An open (or opening) connection. Create it with `new Connection(path, timeoutMs)`; requests
 * may be exchanged at once and are queued until the hello arrives. After any failure the
 * connection is closed for good (`closed` is true) and every outstanding request is rejected;
 * open a new one to continue.
 */
export class Connection {
	/** Resolves with the hello; rejects if the connection fails before it. Always handled. */
	readonly ready: Promise<Hello>;
	/** Called (guarded) for every pushed event. */
	onEvent: ((event: EventFrame) => void) | undefined;
	/** Called (guarded) once, when the connection ends for any reason. */
	onClose: ((reason: Error) => void) | undefined;

	private readonly socket: Socket | undefined;
	private readonly path: string;
	private hello: Hello | undefined;
	private closedReason: Error | undefined;
	private readonly outbox: string[] = [];
	private readonly waiting = new Map<string, Waiter>();
	private chunks: Buffer[] = [];
	private buffered = 0;
	private connectTimer: NodeJS.Timeout | undefined;
	private settleReady: { resolve: (hello: Hello) => void; reject: (error: Error) => void } | undefined;

	constructor(path: string, timeoutMs: number) {
		this.path = path;
		this.ready = new Promise<Hello>((resolve, reject) => {
			this.settleReady = { resolve, reject };
		});
		// Callers that only use `exchange` never await `ready`; it must not become unhandled.
		this.ready.catch(() => undefined);
		if (Buffer.byteLength(path) > MAX_SOCKET_PATH_BYTES) {
			this.socket = undefined;
			this.fail(
				new ServerUnreachableError(
					`the socket path ${path} is longer than ${MAX_SOCKET_PATH_BYTES} bytes; use a shorter PI_WORKFLOWS_HOME`,
				),
			);
			return;
		}
		const socket = createConnection({ path });
		this.socket = socket;
		socket.on("data", (data: Buffer) => this.guard(() => this.receive(data)));
		socket.on("error", (error: NodeJS.ErrnoException) => this.guard(() => this.fail(this.describe(error))));
		socket.on("close", () =>
			this.guard(() =>
				this.fail(
					new ConnectionLostError(
						this.hello
							? "the server closed the connection"
							: `the server at ${path} closed the connection before its hello`,
					),
				),
			),
		);
		this.connectTimer = setTimeout(
			() =>
				this.guard(() =>
					this.fail(new ConnectionLostError(`the server at ${path} sent no hello within ${timeoutMs / 1000} s`)),
				),
			timeoutMs,
		);
	}

	/** True once the connection has failed or was closed. */
	get closed(): boolean {
		return this.closedReason !== undefined;
	}

	/** The hello, once it has arrived. */
	get serverHello(): Hello | undefined {
		return this.hello;
	}

	/**
	 * Send one request (queued until the hello) and resolve with its response, or reject with
	 * `ConnectionLostError` when the connection ends or no reply comes within `timeoutMs` (the
	 * connection is then closed), with the connect error if it never opened, or with
	 * `RequestTooLargeError` (nothing sent, connection kept).
	 */
	exchange(request: RequestFrame, timeoutMs: number): Promise<ResponseFrame> {
		if (this.closedReason) return Promise.reject(this.closedReason);
		const frame = `${JSON.stringify(request)}\n`;
		if (Buffer.byteLength(frame) > MAX_FRAME_BYTES) {
			return Promise.reject(
				new RequestTooLargeError(`the ${request.operation} request is larger than ${MAX_FRAME_BYTES} bytes`),
			);
		}
		return new Promise<ResponseFrame>((resolve, reject) => {
			const timer = setTimeout(
				() =>
					this.guard(() =>
						this.fail(new ConnectionLostError(`no reply to ${request.operation} within ${timeoutMs / 1000} s`)),
					),
				timeoutMs,
			);
			this.waiting.set(request.requestId, { resolve, reject, timer });
			if (this.hello) this.write(frame);
			else this.outbox.push(frame);
		});
	}

	/** Close the connection; outstanding requests are rejected with `reason`. Idempotent. */
	close(reason: Error = new ConnectionLostError("the connection was closed")): void {
		this.fail(reason);
	}

	// -- internals ---------------------------------------------------------------------

	/** Run a socket or timer callback so that nothing it throws can reach Node's event loop. */
	private guard(body: () => void): void {
		try {
			body();
		} catch (error) {
			try {
				this.fail(error instanceof Error ? error : new ConnectionLostError(String(error)));
			} catch {
				// Nothing more can be done; the connection is already unusable.
			}
		}
	}

	private describe(error: NodeJS.ErrnoException): Error {
		if (!this.hello && error.code && NO_LISTENER.has(error.code)) {
			return new ServerNotRunningError(
				this.path,
				error.code === "ENOENT" ? "socket missing" : "connection refused",
			);
		}
		if (!this.hello) return new ServerUnreachableError(`cannot connect to ${this.path}: ${error.message}`);
		return new ConnectionLostError(`the connection to the server failed: ${error.message}`);
	}

	private write(frame: string): void {
		this.socket?.write(frame);
	}

	private receive(data: Buffer): void {
		let start = 0;
		let newline = data.indexOf(0x0a, start);
		while (newline !== -1 && !this.closedReason) {
			const piece = data.subarray(start, newline);
			const line = this.chunks.length ? Buffer.concat([...this.chunks, piece]) : piece;
			this.chunks = [];
			this.buffered = 0;
			if (line.length + 1 > MAX_FRAME_BYTES) {
				this.fail(new ConnectionLostError(`the server sent a frame over the ${MAX_FRAME_BYTES}-byte limit`));
				return;
			}
			this.handleFrame(line.toString("utf8"));
			start = newline + 1;
			newline = data.indexOf(0x0a, start);
		}
		if (start < data.length && !this.closedReason) {
			this.chunks.push(data.subarray(start));
			this.buffered += data.length - start;
			if (this.buffered > MAX_FRAME_BYTES) {
				this.fail(new ConnectionLostError(`the server sent a frame over the ${MAX_FRAME_BYTES}-byte limit`));
			}
		}
	}

	private handleFrame(text: string): void {
		let message: unknown;
		try {
			message = JSON.parse(text);
		} catch {
			this.fail(
				this.hello
					? new ConnectionLostError("the server sent a frame that is not JSON")
					: new ProtocolMismatchError(`the peer at ${this.path} did not start with a pi-workflows hello`),
			);
			return;
		}
		if (typeof message !== "object" || message === null || Array.isArray(message)) {
			this.fail(new ConnectionLostError("the server sent a frame that is not a JSON object"));
			return;
		}
		const frame = message as { type?: unknown };
		if (!this.hello) {
			this.acceptHello(frame as Partial<Hello>);
			return;
		}
		if (frame.type === "response") {
			const response = frame as ResponseFrame;
			const waiter = this.waiting.get(response.requestId);
			if (!waiter) {
				this.fail(new ConnectionLostError(`the server answered an unknown request ${String(response.requestId)}`));
				return;
			}
			this.waiting.delete(response.requestId);
			clearTimeout(waiter.timer);
			waiter.resolve(response);
			return;
		}
		if (frame.type === "event") {
			const handler = this.onEvent;
			if (handler) {
				try {
					handler(frame as EventFrame);
				} catch {
					// An event handler's failure is its own; the connection goes on.
				}
			}
			return;
		}
		if (frame.type === "hello") {
			this.fail(new ConnectionLostError("the server sent a second hello"));
			return;
		}
		this.fail(new ConnectionLostError(`the server sent an unknown message type ${String(frame.type)}`));
	}

	private acceptHello(hello: Partial<Hello>): void {
		if (hello.type !== "hello") {
			this.fail(new ProtocolMismatchError(`the peer at ${this.path} did not start with a hello`));
			return;
		}
		if (hello.schema !== CLIENT_SCHEMA || hello.protocolVersion !== PROTOCOL_VERSION) {
			this.fail(
				new ProtocolMismatchError(
					`the server at ${this.path} speaks ${String(hello.schema)} protocol version ${String(hello.protocolVersion)}; ` +
						`this extension speaks ${CLIENT_SCHEMA} protocol version ${PROTOCOL_VERSION} ` +
						"(upgrade or restart the server with this version of pi-workflows)",
				),
			);
			return;
		}
		this.hello = hello as Hello;
		if (this.connectTimer) clearTimeout(this.connectTimer);
		this.connectTimer = undefined;
		this.settleReady?.resolve(this.hello);
		for (const frame of this.outbox.splice(0)) this.write(frame);
	}

	private fail(reason: Error): void {
		if (this.closedReason) return;
		this.closedReason = reason;
		if (this.connectTimer) clearTimeout(this.connectTimer);
		this.connectTimer = undefined;
		this.outbox.length = 0;
		this.chunks = [];
		if (this.socket && !this.socket.destroyed) this.socket.destroy();
		this.settleReady?.reject(reason);
		const waiters = [...this.waiting.values()];
		this.waiting.clear();
		for (const waiter of waiters) {
			clearTimeout(waiter.timer);
			waiter.reject(reason);
		}
		const handler = this.onClose;
		if (handler) {
			try {
				handler(reason);
			} catch {
				// A close handler's failure is its own.
			}
		}
	}
}
