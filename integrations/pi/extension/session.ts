/**
 * The extension's state for one Pi session: the server client it opened at `session_start`
 * for the command and the tool, and the session's coordinator, both closed at
 * `session_shutdown`.
 *
 * Owns when resources exist. The factory creates only an empty `SessionSlot`; clients, sockets
 * and the coordinator are created in `session_start` and closed (idempotently) in
 * `session_shutdown`, including for `/new`, `/resume`, `/fork` and `/reload`, which end one
 * session and start the next. Only the coordinator keeps the Pi context (to present messages
 * from socket callbacks), and it drops it at shutdown and guards every use of it.
 */

import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";

import { WorkflowClient } from "./client.ts";
import { SessionCoordinator } from "./coordinator.ts";
import { ClientClosedError } from "./errors.ts";
import { WorkflowOperations } from "./operations.ts";
import { bundledCli, resolveCli, socketPath, stateHome } from "./paths.ts";
import { hasWorkflowEntries } from "./presentation.ts";

/** The longest client id the protocol accepts is 200 characters. */
const MAX_CLIENT_ID = 200;

/** The Pi modes with a person or a driver on the other side: only they present workflow messages. */
const PRESENTING_MODES = new Set(["tui", "rpc"]);

export interface ExtensionOptions {
	/** The `pi-workflows` executable to run (a loader of its own may pass one). */
	cli?: string;
	/**
	 * The extension's own directory: without `cli`, the CLI installed with the extension is
	 * found from it (`bundledCli`).
	 */
	extensionDir?: string;
}

/** What the extension holds while one Pi session runs. */
export class WorkflowSession {
	readonly sessionId: string;
	readonly client: WorkflowClient;
	readonly operations: WorkflowOperations;
	/** The session's coordinator (absent in print and JSON modes, which present nothing). */
	readonly coordinator: SessionCoordinator | undefined;

	constructor(
		pi: ExtensionAPI,
		ctx: ExtensionContext,
		options: ExtensionOptions,
		env: NodeJS.ProcessEnv = process.env,
	) {
		this.sessionId = ctx.sessionManager.getSessionId();
		const socket = socketPath(stateHome(env));
		const installed = options.cli ?? (options.extensionDir ? bundledCli(options.extensionDir) : undefined);
		const cli = resolveCli(installed, env);
		this.client = new WorkflowClient({
			socketPath: socket,
			cli,
			clientId: `pi:${this.sessionId}`.slice(0, MAX_CLIENT_ID),
		});
		this.operations = new WorkflowOperations(this.client);
		if (PRESENTING_MODES.has(ctx.mode)) {
			const coordinatorClient = new WorkflowClient({
				socketPath: socket,
				cli,
				clientId: `pi-coordinator:${this.sessionId}`.slice(0, MAX_CLIENT_ID),
			});
			this.coordinator = new SessionCoordinator(pi, this.sessionId, coordinatorClient, this.operations, {
				autostart: hasWorkflowEntries(ctx.sessionManager.getBranch()),
			});
			const coordinator = this.coordinator;
			this.client.onConnect = () => coordinator.nudge();
		}
	}

	/** Close the clients, the coordinator, their timers and every outstanding request. Idempotent. */
	close(): void {
		this.coordinator?.stop();
		this.client.close();
	}
}

/** How long a shutting-down session waits for its coordinator's last reports. */
const SHUTDOWN_FLUSH_MS = 1500;

/** The session currently served, if any; lives as long as the extension instance. */
export class SessionSlot {
	private session: WorkflowSession | undefined;
	private readonly pi: ExtensionAPI;
	private readonly options: ExtensionOptions;

	constructor(pi: ExtensionAPI, options: ExtensionOptions) {
		this.pi = pi;
		this.options = options;
	}

	/** `session_start`: open the clients for the session of `ctx` (closing any previous ones). */
	start(ctx: ExtensionContext): WorkflowSession {
		this.stop();
		const session = new WorkflowSession(this.pi, ctx, this.options);
		this.session = session;
		session.client.connectInBackground();
		session.coordinator?.start(ctx);
		return session;
	}

	/** `session_shutdown`: close everything. Safe to call any number of times. */
	stop(): void {
		const session = this.session;
		this.session = undefined;
		session?.close();
	}

	/**
	 * `session_shutdown` (Pi awaits it): first send the reports the coordinator still holds
	 * (a turn that ended just before Pi quits, so the server does not take it for a turn that
	 * died), for at most `SHUTDOWN_FLUSH_MS`, then close everything.
	 */
	async shutdown(): Promise<void> {
		const session = this.session;
		if (session?.coordinator) await session.coordinator.drain(SHUTDOWN_FLUSH_MS);
		if (this.session === session) this.stop();
	}

	/** The running session, or `ClientClosedError` outside `session_start`…`session_shutdown`. */
	current(): WorkflowSession {
		if (!this.session) throw new ClientClosedError();
		return this.session;
	}

	/** The running session's coordinator, touched with the newest context; undefined if none. */
	coordinator(ctx: ExtensionContext): SessionCoordinator | undefined {
		const coordinator = this.session?.coordinator;
		coordinator?.touch(ctx);
		return coordinator;
	}
}
