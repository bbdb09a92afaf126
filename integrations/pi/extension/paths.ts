/**
 * Where the extension finds the pi-workflows server and CLI: the state directory, its socket,
 * and the `pi-workflows` executable that starts a server.
 *
 * Owns the extension's copy of the state-directory rule, which must agree with
 * `src/pi_workflows/client/paths.py` (change both together). Pure functions of the
 * environment: this module never creates, opens or connects to anything.
 */

import { homedir } from "node:os";
import { join, resolve } from "node:path";

/** The server's Unix socket, directly inside the state directory. */
export const SOCKET_NAME = "server.sock";

/** The environment variable that names the `pi-workflows` executable to run. */
export const CLI_ENV = "PI_WORKFLOWS_CLI";

/** The executable looked up on PATH when nothing else names one. */
export const DEFAULT_CLI = "pi-workflows";

/** Longest Unix socket path Linux accepts (108 bytes including the terminating NUL). */
export const MAX_SOCKET_PATH_BYTES = 107;

type Environment = Readonly<Record<string, string | undefined>>;

/** `~` and `~/...` expanded with the home directory, as Python's `Path.expanduser` does. */
function expandUser(path: string, env: Environment): string {
	if (path !== "~" && !path.startsWith("~/")) return path;
	const home = env.HOME ? env.HOME : homedir();
	return path === "~" ? home : join(home, path.slice(2));
}

/**
 * The absolute state directory: `$PI_WORKFLOWS_HOME` when set and non-empty, else
 * `$XDG_STATE_HOME/pi-workflows`, else `~/.local/state/pi-workflows`.
 */
export function stateHome(env: Environment = process.env): string {
	const explicit = env.PI_WORKFLOWS_HOME;
	if (explicit) return resolve(expandUser(explicit, env));
	const xdg = env.XDG_STATE_HOME;
	const base = xdg ? expandUser(xdg, env) : join(env.HOME ? env.HOME : homedir(), ".local", "state");
	return resolve(base, "pi-workflows");
}

/** The server's socket inside the state directory `home`. */
export function socketPath(home: string): string {
	return join(home, SOCKET_NAME);
}

/**
 * The `pi-workflows` executable the extension runs to start a server:
 * `$PI_WORKFLOWS_CLI` when set and non-empty, else the path `pi-workflows pi install`
 * recorded (`installed`), else `pi-workflows` looked up on PATH.
 */
export function resolveCli(installed: string | undefined, env: Environment = process.env): string {
	const explicit = env[CLI_ENV];
	if (explicit) {
		// A bare name is looked up on PATH; anything with a slash is a path (made absolute).
		const expanded = expandUser(explicit, env);
		return expanded.includes("/") ? resolve(expanded) : expanded;
	}
	if (installed) return installed;
	return DEFAULT_CLI;
}
