/**
 * How the TUI draws the extension's session entries: the cards of a human decision, of a
 * question for the person and of a refused step (custom entries the model never receives) and the workflow messages (custom
 * messages the model receives as user-role text), each under a one-line header saying what
 * it is.
 *
 * Runs in the Pi process, only in interactive mode (RPC clients get the entries themselves).
 * Renderers are pure: they read the entry and the theme and never contact the server.
 */

import type { ExtensionAPI } from "@earendil-works/pi-coding-agent";
import { Box, Text } from "@earendil-works/pi-tui";

import {
	DECISION_ENTRY_TYPE,
	type DecisionCard,
	MESSAGE_TYPE,
	type MessageDetails,
	QUESTION_ENTRY_TYPE,
	type QuestionCard,
	REFUSAL_ENTRY_TYPE,
	type RefusalCard,
} from "./presentation.ts";

const HEADERS: Record<string, string> = {
	step: "workflow step",
	notification: "workflow",
	terminal: "workflow finished",
	followUp: "workflow follow-up",
	rejection: "workflow step: reply rejected",
	closed: "workflow step closed",
};

/** Register the decision, question and refusal cards' entry renderers and the workflow messages' renderer. */
export function registerRenderers(pi: ExtensionAPI): void {
	pi.registerEntryRenderer<DecisionCard>(DECISION_ENTRY_TYPE, (entry, _options, theme) => {
		const card = entry.data;
		const box = new Box(1, 1, (text) => theme.bg("customMessageBg", text));
		box.addChild(new Text(theme.fg("accent", "[workflow decision — for you, not the model]"), 0, 0));
		box.addChild(new Text(card ? card.text : "(a workflow decision)", 0, 0));
		return box;
	});
	pi.registerEntryRenderer<QuestionCard>(QUESTION_ENTRY_TYPE, (entry, _options, theme) => {
		const box = new Box(1, 1, (text) => theme.bg("customMessageBg", text));
		box.addChild(new Text(theme.fg("accent", "[workflow question — for you, not the model]"), 0, 0));
		box.addChild(new Text(entry.data ? entry.data.text : "(a workflow question)", 0, 0));
		return box;
	});
	pi.registerEntryRenderer<RefusalCard>(REFUSAL_ENTRY_TYPE, (entry, _options, theme) => {
		const box = new Box(1, 1, (text) => theme.bg("customMessageBg", text));
		box.addChild(new Text(theme.fg("error", "[workflow step refused — for you, not the model]"), 0, 0));
		box.addChild(new Text(entry.data ? entry.data.text : "(a workflow step was refused)", 0, 0));
		return box;
	});
	pi.registerMessageRenderer<MessageDetails>(MESSAGE_TYPE, (message, options, theme) => {
		const kind = message.details?.kind ?? "";
		const header = HEADERS[kind] ?? "workflow";
		const content =
			typeof message.content === "string"
				? message.content
				: message.content
						.map((part) => (part.type === "text" ? part.text : ""))
						.join("");
		const box = new Box(options.outputPad, 1, (text) => theme.bg("customMessageBg", text));
		box.addChild(new Text(theme.fg("accent", `[${header}]`), 0, 0));
		box.addChild(new Text(content, 0, 0));
		return box;
	});
}
