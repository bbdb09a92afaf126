/**
 * The pi-workflows extension for the Pi coding agent: the `/workflow` command for the person
 * and the `workflow` tool for the model, both clients of the pi-workflows server over
 * `<state dir>/server.sock` (client protocol v1).
 *
 * Layout:
 *
 * - `paths.ts`: the state directory, the socket and the CLI (the Python client's rule).
 * - `connection.ts`: one socket: hello, framing, request/response matching, deadlines.
 * - `client.ts`: `WorkflowClient`: durable retries with one idempotency key, auto-start.
 * - `autostart.ts`: starting a server with `pi-workflows server start`.
 * - `operations.ts`: the protocol operations the command and tool use, and their shapes.
 * - `session.ts`: what exists between `session_start` and `session_shutdown`.
 * - `command.ts`, `tool.ts`: `/workflow` and `workflow`; `format.ts`: their text.
 * - `errors.ts`: the extension's errors, each one line.
 *
 * Pi loads this file with jiti (no build step). The factory only registers the command, the
 * tool and two handlers; the socket opens at `session_start` and closes at `session_shutdown`.
 * The extension never opens the state database and never runs workflow code.
 */

import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

import { registerWorkflowCommand } from "./command.ts";
import { type ExtensionOptions, SessionSlot } from "./session.ts";
import { registerWorkflowTool } from "./tool.ts";

export type { ExtensionOptions } from "./session.ts";

/**
 * The extension factory, configured: `pi-workflows pi install` writes a loader that calls it
 * with the absolute path of the `pi-workflows` executable it was run from.
 */
export function createWorkflowExtension(options: ExtensionOptions = {}): (pi: ExtensionAPI) => void {
	return (pi: ExtensionAPI) => {
		const slot = new SessionSlot(options);
		pi.on("session_start", (_event, ctx) => {
			slot.start(ctx.sessionManager.getSessionId());
		});
		pi.on("session_shutdown", () => {
			slot.stop();
		});
		registerWorkflowCommand(pi, slot);
		registerWorkflowTool(pi, slot);
	};
}

/** The extension as `pi -e integrations/pi/extension/index.ts` loads it (CLI from the environment). */
export default createWorkflowExtension();
