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
 * - `coordinator.ts`: the session coordinator: presents workflow messages, reports the branch
 *   and model turns; `presentation.ts`: our entries, their text, the widget and status line.
 * - `toollimit.ts`: a step's tool limit (`allowed_tools`), enforced through Pi's `tool_call` hook.
 * - `command.ts`, `tool.ts`: `/workflow` and `workflow`; `format.ts`: their text.
 * - `renderers.ts`: how the TUI draws our entries.
 * - `errors.ts`: the extension's errors, each one line.
 *
 * Pi loads this file with jiti (no build step). The factory only registers the command, the
 * tool, the renderers and event handlers; sockets open at `session_start` and close at
 * `session_shutdown`. The extension never opens the state database and never runs workflow
 * code.
 */

import { dirname } from "node:path";
import { fileURLToPath } from "node:url";

import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";

import { registerWorkflowCommand } from "./command.ts";
import { registerRenderers } from "./renderers.ts";
import { type ExtensionOptions, SessionSlot } from "./session.ts";
import { registerWorkflowTool } from "./tool.ts";

export type { ExtensionOptions } from "./session.ts";

/**
 * The extension factory, configured: `cli` names the `pi-workflows` executable to run, or
 * `extensionDir` the extension's directory, from which the CLI installed with it is found.
 */
export function createWorkflowExtension(options: ExtensionOptions = {}): (pi: ExtensionAPI) => void {
	return (pi: ExtensionAPI) => {
		const slot = new SessionSlot(pi, options);
		pi.on("session_start", (_event, ctx) => {
			slot.start(ctx);
		});
		pi.on("session_shutdown", async () => {
			try {
				await slot.shutdown();
			} catch {
				slot.stop();
			}
		});
		pi.on("session_tree", (_event, ctx) => slot.coordinator(ctx)?.onTree());
		pi.on("before_agent_start", (event, ctx) => {
			slot.coordinator(ctx)?.onBeforeAgentStart(event);
		});
		pi.on("message_start", (_event, ctx) => slot.coordinator(ctx)?.onProgress());
		pi.on("message_end", (_event, ctx) => {
			slot.coordinator(ctx)?.onProgress();
		});
		pi.on("turn_end", (_event, ctx) => {
			slot.coordinator(ctx)?.onProgress();
		});
		pi.on("agent_end", (event, ctx) => slot.coordinator(ctx)?.onAgentEnd(event));
		pi.on("agent_settled", (event, ctx) => slot.coordinator(ctx)?.onAgentSettled(event));
		// A workflow step's tool limit: every other tool call is blocked while the step is in force.
		pi.on("tool_call", (event, ctx) => slot.coordinator(ctx)?.onToolCall(event.toolName));
		registerWorkflowCommand(pi, slot);
		registerWorkflowTool(pi, slot);
		registerRenderers(pi);
	};
}

/**
 * The extension as Pi loads it from the Pi package (`pi-workflows pi install`) or with
 * `pi -e .../extension/index.ts`: the CLI is `$PI_WORKFLOWS_CLI`, else the one installed with
 * this package, else `pi-workflows` on PATH.
 */
export default createWorkflowExtension({ extensionDir: dirname(fileURLToPath(import.meta.url)) });
