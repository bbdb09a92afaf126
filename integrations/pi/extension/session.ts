/**
 * The extension's state for one Pi session: the server client it opened at `session_start`
 * and closes at `session_shutdown`.
 *
 * Owns when resources exist. The factory creates only an empty `SessionSlot`; the client and
 * its socket are created in `session_start` and closed (idempotently) in `session_shutdown`,
 * including for `/new`, `/resume`, `/fork` and `/reload`, which end one session and start the
 * next. Only plain data is kept from the Pi context (the session id and working directory),
 * never the context itself, so nothing here can touch a stale context after shutdown.
 */

import { WorkflowClient } from "./client.ts";
import { ClientClosedError } from "./errors.ts";
import { WorkflowOperations } from "./operations.ts";
import { resolveCli, socketPath, stateHome } from "./paths.ts";

/** The longest client id the protocol accepts is 200 characters. */
const MAX_CLIENT_ID = 200;

export interface ExtensionOptions {
	/** The `pi-workflows` executable recorded by `pi-workflows pi install`. */
	cli?: string;
}

/** What the extension holds while one Pi session runs. */
export class WorkflowSession {
	readonly sessionId: string;
	readonly client: WorkflowClient;
	readonly operations: WorkflowOperations;

	constructor(sessionId: string, options: ExtensionOptions, env: NodeJS.ProcessEnv = process.env) {
		this.sessionId = sessionId;
		this.client = new WorkflowClient({
			socketPath: socketPath(stateHome(env)),
			cli: resolveCli(options.cli, env),
			clientId: `pi:${sessionId}`.slice(0, MAX_CLIENT_ID),
		});
		this.operations = new WorkflowOperations(this.client);
	}

	/** Close the client: its socket, its timers, and every outstanding request. Idempotent. */
	close(): void {
		this.client.close();
	}
}

/** The session currently served, if any; lives as long as the extension instance. */
export class SessionSlot {
	private session: WorkflowSession | undefined;
	private readonly options: ExtensionOptions;

	constructor(options: ExtensionOptions) {
		this.options = options;
	}

	/** `session_start`: open the client for `sessionId` (closing any previous one). */
	start(sessionId: string): WorkflowSession {
		this.stop();
		const session = new WorkflowSession(sessionId, this.options);
		this.session = session;
		session.client.connectInBackground();
		return session;
	}

	/** `session_shutdown`: close the client. Safe to call any number of times. */
	stop(): void {
		const session = this.session;
		this.session = undefined;
		session?.close();
	}

	/** The running session, or `ClientClosedError` outside `session_start`…`session_shutdown`. */
	current(): WorkflowSession {
		if (!this.session) throw new ClientClosedError();
		return this.session;
	}
}
