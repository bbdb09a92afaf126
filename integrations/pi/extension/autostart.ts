/**
 * Start a server on demand by running the pi-workflows CLI: `pi-workflows server start --json`.
 *
 * Owns the one way the extension starts a server. The CLI starts it detached (its own session,
 * output in `<state dir>/logs/server.log`) and returns once it answers, so the server outlives
 * Pi. Runs in the Pi process; the child inherits Pi's environment, so the CLI resolves the same
 * state directory as `paths.ts`. It never opens the database, never runs workflow code, and its
 * process callback cannot throw.
 */

import { type ExecFileException, execFile } from "node:child_process";

import { oneLine, ServerStartError } from "./errors.ts";
import { CLI_ENV } from "./paths.ts";

/** How long `server start` may take before the extension gives up on it. */
export const START_TIMEOUT_MS = 30_000;

/** The longest CLI output kept for an error message. */
const MAX_OUTPUT_BYTES = 64 * 1024;

/**
 * Run `<cli> server start --json` and resolve once it exits 0 (a server answers).
 *
 * Rejects with `ServerStartError`: the CLI is missing, exited non-zero (its one-line
 * `pi-workflows: error: ...` message is kept), or ran longer than `timeoutMs`.
 */
export function startServer(cli: string, timeoutMs: number = START_TIMEOUT_MS): Promise<void> {
	return new Promise<void>((resolve, reject) => {
		try {
			execFile(
				cli,
				["server", "start", "--json", "--timeout", String(Math.max(1, Math.floor(timeoutMs / 1000) - 1))],
				{ timeout: timeoutMs, maxBuffer: MAX_OUTPUT_BYTES, windowsHide: true, encoding: "utf8" },
				(error, _stdout, stderr) => {
					try {
						if (!error) {
							resolve();
							return;
						}
						reject(describeFailure(cli, error, String(stderr)));
					} catch (unexpected) {
						reject(new ServerStartError(`starting the server failed: ${String(unexpected)}`));
					}
				},
			);
		} catch (error) {
			reject(new ServerStartError(`cannot run ${cli}: ${String(error)}`));
		}
	});
}

function describeFailure(
	cli: string,
	error: ExecFileException,
	stderr: string,
): ServerStartError {
	if (error.code === "ENOENT") {
		return new ServerStartError(
			`the pi-workflows CLI was not found (${cli}); run \`pi-workflows pi install\` or set ${CLI_ENV}`,
		);
	}
	if (error.code === "EACCES") {
		return new ServerStartError(`the pi-workflows CLI (${cli}) is not executable; set ${CLI_ENV}`);
	}
	if (error.killed) {
		return new ServerStartError(`\`${cli} server start\` did not finish in time; see its server.log`);
	}
	const lines = stderr
		.split("\n")
		.map((line) => line.trim())
		.filter((line) => line.length > 0);
	const reported = lines.find((line) => line.startsWith("pi-workflows: error:")) ?? lines[lines.length - 1];
	const detail = reported ? reported.replace(/^pi-workflows: error:\s*/, "") : `exit status ${String(error.code)}`;
	return new ServerStartError(oneLine(`the pi-workflows server could not be started: ${detail}`));
}
