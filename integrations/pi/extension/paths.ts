/**
 * Where the extension finds the pi-workflows server and CLI: the state directory, its socket,
 * and the `pi-workflows` executable that starts a server.
 *
 * Owns the extension's copy of the state-directory rule, which must agree with
 * `src/pi_workflows/client/paths.py`, and of the rule that finds the CLI installed with the
 * extension, which must agree with `src/pi_workflows/pi_package.py` (change both together).
 * Functions of the environment and of which files are executable: this module never
 * creates, opens or connects to anything.
 */

import { accessSync, constants } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";

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

/**
 * Pi's agent directory, where its `settings.json` and `models.json` are:
 * `$PI_CODING_AGENT_DIR` when set and non-empty, else `~/.pi/agent` (Pi's own rule, and
 * `agent_dir` in `src/pi_workflows/cli/pi_registration.py`).
 */
export function agentDir(env: Environment = process.env): string {
	const explicit = env.PI_CODING_AGENT_DIR;
	if (explicit) return resolve(expandUser(explicit, env));
	return join(env.HOME ? env.HOME : homedir(), ".pi", "agent");
}

/** The server's socket inside the state directory `home`. */
export function socketPath(home: string): string {
	return join(home, SOCKET_NAME);
}

/** The directories a wheel's files are installed into, under `<prefix>/lib/pythonX.Y/`. */
const SITE_DIRS = new Set(["site-packages", "dist-packages"]);

function isExecutable(path: string): boolean {
	try {
		accessSync(path, constants.X_OK);
		return true;
	} catch {
		return false;
	}
}

/**
 * The `pi-workflows` of the Python installation this extension belongs to, found from the
 * extension's own directory (`<package>/extension`), or undefined:
 *
 * - installed from a wheel, the package is `<prefix>/lib/pythonX.Y/site-packages/pi_workflows/
 *   integrations/pi` and the CLI is `<prefix>/bin/pi-workflows` (a virtual environment, pipx,
 *   `uv tool`, `pip install --user`);
 * - in a source checkout, the package is `<checkout>/integrations/pi` and the CLI is the
 *   Makefile's virtual environment's, `<checkout>/.venv/bin/pi-workflows`.
 *
 * Only an executable file counts.
 */
export function bundledCli(extensionDir: string, executable: (path: string) => boolean = isExecutable): string | undefined {
	const pkg = dirname(resolve(extensionDir));
	const candidates: string[] = [];
	const site = resolve(pkg, "..", "..", "..");
	if (
		basename(pkg) === "pi" &&
		basename(dirname(pkg)) === "integrations" &&
		basename(dirname(dirname(pkg))) === "pi_workflows" &&
		SITE_DIRS.has(basename(site))
	) {
		candidates.push(join(resolve(site, "..", "..", ".."), "bin", "pi-workflows"));
	}
	if (basename(pkg) === "pi" && basename(dirname(pkg)) === "integrations") {
		candidates.push(join(dirname(dirname(pkg)), ".venv", "bin", "pi-workflows"));
	}
	return candidates.find((candidate) => executable(candidate));
}

/**
 * The `pi-workflows` executable the extension runs to start a server:
 * `$PI_WORKFLOWS_CLI` when set and non-empty, else `installed` (the path a loader passed, or
 * `bundledCli` of the extension's directory), else `pi-workflows` looked up on PATH.
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
