"""The watch view's dialogs: confirm an action, answer a checkpoint or an agent step,
choose a decision.

Each is a Textual modal screen that dismisses with its result (``None`` when escaped), so
the run screen decides what to send. Nothing here contacts the server.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Label, OptionList, Static
from textual.widgets.option_list import Option

__all__ = ["AnswerDialog", "ChoiceDialog", "ConfirmDialog"]

_CSS = """
ConfirmDialog, AnswerDialog, ChoiceDialog { align: center middle; }
#dialog { width: 70; height: auto; border: thick $accent; background: $surface; padding: 1 2; }
#problem { color: $error; }
#asked { height: auto; max-height: 20; }
"""


class ConfirmDialog(ModalScreen[bool]):
    """Asks one yes/no question: `y` confirms, `n` or escape declines."""

    DEFAULT_CSS = _CSS
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "yes"),
        Binding("n", "answer(False)", "no"),
        Binding("escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.question)
            yield Label("y: yes    n: no")

    def action_answer(self, yes: bool) -> None:
        """Close with the answer."""
        self.dismiss(yes)


class AnswerDialog(ModalScreen[Any]):
    """Asks for a checkpoint's answer or an agent step's output as JSON, below what the
    request asks (`rows`: label and text, e.g. the prompt and the expected output with its
    schema); invalid JSON is refused in place."""

    DEFAULT_CSS = _CSS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]
    AUTO_FOCUS = "#value"  # typing goes to the answer, not to the scrolling request above

    def __init__(self, title: str, rows: list[tuple[str, str]] | None = None) -> None:
        super().__init__()
        self.question = title
        self.rows = rows or []

    def compose(self) -> ComposeResult:
        asked = Text()
        for label, text in self.rows:
            asked.append(f"{label}: ", style="bold")
            asked.append(f"{text}\n")
        asked.rstrip()
        with Vertical(id="dialog"):
            yield Label(self.question, id="title")
            with VerticalScroll(id="asked"):
                yield Static(asked, id="request")
            yield Input(placeholder='JSON, e.g. {"answer": "yes"}', id="value")
            yield Label("", id="problem")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Close with the parsed value, or say why it is not JSON."""
        try:
            value = json.loads(event.value)
        except ValueError as exc:
            self.query_one("#problem", Label).update(f"not valid JSON: {exc}")
            return
        self.dismiss({"value": value})

    def action_cancel(self) -> None:
        """Close without an answer."""
        self.dismiss(None)


class ChoiceDialog(ModalScreen[str | None]):
    """Lists a decision's choices; enter picks the highlighted one."""

    DEFAULT_CSS = _CSS
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, choices: list[tuple[str, str]]) -> None:
        super().__init__()
        self.title_text = title
        self.choices = choices

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(self.title_text)
            yield OptionList(
                *(Option(f"{label} ({choice})", id=choice) for choice, label in self.choices),
                id="choices",
            )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Close with the chosen id."""
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        """Close without a choice."""
        self.dismiss(None)
