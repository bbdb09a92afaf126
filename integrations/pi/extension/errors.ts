/**
 * The errors the extension raises, each with a one-line message fit for the Pi UI and the
 * model. Runs in the Pi process; never prints. (Plain fields, no parameter properties or enums:
 * the sources stay erasable TypeScript.)
 *
 * `WorkflowError` is the root. `CommandRefusedError` carries the server's own `error.code` and
 * one-line `error.message`; the others describe why no answer came at all.
 */

/** Root of every error the extension raises; `message` is always one line. */
export class WorkflowError extends Error {
	constructor(message: string) {
		super(oneLine(message));
		this.name = new.target.name;
	}
}

/** The server answered, and refused: `rejected`, `conflict`, `notFound`, `claimLost` or `unavailable`. */
export class CommandRefusedError extends WorkflowError {
	readonly operation: string;
	readonly outcome: string;
	readonly code: string;

	constructor(message: string, operation: string, outcome: string, code: string) {
		super(message);
		this.operation = operation;
		this.outcome = outcome;
		this.code = code;
	}
}

/**
 * Nobody listens on the socket (it is missing or refuses connections): a server may be
 * started. Distinct from `ServerUnreachableError`, where starting one would not help.
 */
export class ServerNotRunningError extends WorkflowError {
	readonly socketPath: string;

	constructor(socketPath: string, reason: string) {
		super(`no pi-workflows server answers on ${socketPath} (${reason})`);
		this.socketPath = socketPath;
	}
}

/** The socket exists but cannot be used (permissions, a path too long, another error). */
export class ServerUnreachableError extends WorkflowError {}

/** Whatever answers on the socket does not speak client protocol v1. */
export class ProtocolMismatchError extends WorkflowError {}

/**
 * The connection broke, or no reply came in time, while a request was outstanding: the
 * server may or may not have received it (a retry with the same idempotency key is safe).
 */
export class ConnectionLostError extends WorkflowError {}

/** Starting the server with `pi-workflows server start` failed, or the CLI was not found. */
export class ServerStartError extends WorkflowError {}

/** The extension was shut down (`session_shutdown`) while the request was outstanding. */
export class ClientClosedError extends WorkflowError {
	constructor() {
		super("the pi-workflows extension is shut down for this session");
	}
}

/** Bad arguments to the `/workflow` command or the `workflow` tool; nothing was sent. */
export class UsageError extends WorkflowError {}

/** The longest message shown in one line of the UI. */
export const MAX_MESSAGE_CHARS = 500;

/** `text` with every run of whitespace (newlines included) collapsed to one space, bounded. */
export function oneLine(text: string, limit: number = MAX_MESSAGE_CHARS): string {
	const flat = text.replace(/\s+/g, " ").trim();
	return flat.length > limit ? `${flat.slice(0, limit - 1)}…` : flat;
}

/**
 * What Pi reports when a turn starts with no model selected: its placeholder model's provider
 * is `unknown` (nothing in `settings.json`, `models.json` or a login gave it one).
 */
const NO_MODEL_ERROR = "Unknown provider: unknown";

/** How `describeModelError`'s text for a missing model starts. */
export const NO_MODEL_PREFIX = "no model is configured";

/**
 * A provider's error text as a person should read it: Pi's `Unknown provider: unknown`
 * becomes `no model is configured: ...` with where to configure one (`agentDir`, Pi's agent
 * directory); any other text is returned as it is.
 */
export function describeModelError(text: string, agentDir: string): string {
	if (text.trim() !== NO_MODEL_ERROR) return text;
	return (
		`${NO_MODEL_PREFIX}: add a provider to models.json and select it with defaultProvider and ` +
		`defaultModel in settings.json, both in ${agentDir}, or log in with /login ` +
		`(Pi said "${NO_MODEL_ERROR}"); check with \`pi-workflows pi doctor\``
	);
}

/** The one-line message of anything thrown. */
export function describeError(error: unknown): string {
	if (error instanceof Error) return oneLine(error.message || error.name);
	return oneLine(String(error));
}
