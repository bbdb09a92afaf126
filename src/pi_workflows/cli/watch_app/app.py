"""The live terminal view: the run list, and one run with its graph, updating as it changes.

Runs in the CLI process (``pi-workflows watch``). Both screens render what the server
pushes (``runs.watch``: the newest runs and counts; ``run.watch``: the `RunView` and its
graph with each node's state), so they show the same status as every other client. Keys
act on the shown run: `p` pause, `r` resume, `c` cancel (confirmed), `a` answer the
checkpoint it waits on or submit its agent step's output by hand (the dialog shows what the
request asks: prompt, expected output and schema, every key of a checkpoint's request), `d`
decide its human decision (choice, then confirmation). Each
action is one client command sent from a worker thread, on a client of its own; its outcome
is shown as a notification. `escape` goes back to the run list (also when the view was
opened on one run), `q` quits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from pi_workflows.cli.graph import render_run_graph
from pi_workflows.cli.output import format_time, plain, progress_text, status_text
from pi_workflows.cli.requests import request_rows
from pi_workflows.cli.show import render_run
from pi_workflows.cli.watch_app.dialogs import AnswerDialog, ChoiceDialog, ConfirmDialog
from pi_workflows.cli.watch_app.feed import follow
from pi_workflows.client import Client, ClientError, JsonObject

__all__ = ["RunScreen", "RunsScreen", "WatchApp"]

_ANSWERABLE = frozenset({"checkpoint", "agent", "assistant"})
"""Request kinds `a` answers: a checkpoint's answer, or an agent step's output submitted by
hand (as `interaction submit` does); a human decision is `d`."""

ClientFactory = Callable[[], Client]

_CSS = """
#counts { height: 1; padding: 0 1; }
#graph { width: 2fr; border: round $primary; padding: 0 1; }
#details { width: 3fr; border: round $primary; padding: 0 1; }
#problem { color: $error; height: auto; padding: 0 1; }
"""


class RunsScreen(Screen[None]):
    """The newest runs, updating live; enter opens one."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "open run"),
        Binding("q", "app.quit", "quit"),
    ]

    def __init__(self, statuses: list[str] | None, workflow: str | None) -> None:
        super().__init__()
        self.statuses = statuses
        self.workflow = workflow
        self.view: JsonObject | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="counts")
        yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        yield Static("", id="problem")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "pi-workflows: runs"
        table = self.query_one("#runs", DataTable)
        table.add_columns("run", "workflow", "status", "node", "updated")
        app = self.watch_app
        self.run_worker(
            lambda: follow(
                app.client,
                lambda client: client.watch_runs(self.statuses, workflow=self.workflow),
                self.show,
                self.problem,
                app.call_from_thread,
            ),
            thread=True,
            exclusive=True,
            name="runs feed",
        )

    @property
    def watch_app(self) -> WatchApp:
        """The application (typed)."""
        assert isinstance(self.app, WatchApp)
        return self.app

    def show(self, view: JsonObject) -> None:
        """Show a pushed run list, keeping the highlighted run highlighted."""
        self.view = view
        counts = view.get("counts") or {}
        line = Text()
        for status, count in sorted(counts.items()):
            line.append_text(status_text(status))
            line.append(f" {count}   ")
        self.query_one("#counts", Static).update(line or Text("no runs"))
        table = self.query_one("#runs", DataTable)
        selected = self.selected_run()
        table.clear()
        for run in view.get("runs") or []:
            status = status_text(run.get("status"))
            status.append(progress_text(run), style="dim")  # a parent's children: 3/10 done
            table.add_row(
                Text(plain(run.get("runId"))),
                Text(plain(run.get("workflow"))),
                status,
                Text(plain(run.get("currentNode"))),
                Text(format_time(run.get("updatedAt"), short=True)),
                key=str(run.get("runId")),
            )
        if selected is not None and selected in table.rows:
            table.move_cursor(row=table.get_row_index(selected))

    def problem(self, message: str) -> None:
        """Say that the feed stopped."""
        self.query_one("#problem", Static).update(Text(message))

    def selected_run(self) -> str | None:
        """The id of the highlighted run, if any."""
        table = self.query_one("#runs", DataTable)
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        return None if key.value is None else str(key.value)

    def action_open(self) -> None:
        """Open the highlighted run."""
        run_id = self.selected_run()
        if run_id is not None:
            self.app.push_screen(RunScreen(run_id))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter (or a click) on a row opens that run."""
        if event.row_key.value is not None:
            self.app.push_screen(RunScreen(str(event.row_key.value)))


class RunScreen(Screen[None]):
    """One run: its graph with each node's state, and its details, updating live."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pause", "pause"),
        Binding("r", "resume", "resume"),
        Binding("c", "cancel_run", "cancel"),
        Binding("a", "answer", "answer"),
        Binding("d", "decide", "decide"),
        Binding("escape", "back", "runs"),
        Binding("q", "app.quit", "quit"),
    ]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.view: JsonObject | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield Static("waiting for the server…", id="graph")
            with VerticalScroll(id="details"):
                yield Static("", id="run")
        yield Static("", id="problem")
        yield Footer()

    @property
    def watch_app(self) -> WatchApp:
        """The application (typed)."""
        assert isinstance(self.app, WatchApp)
        return self.app

    def on_mount(self) -> None:
        self.title = f"pi-workflows: {self.run_id}"
        app = self.watch_app
        self.run_worker(
            lambda: follow(
                app.client,
                lambda client: client.watch_run(self.run_id),
                self.show,
                self.problem,
                app.call_from_thread,
            ),
            thread=True,
            exclusive=True,
            name="run feed",
        )

    def show(self, view: JsonObject) -> None:
        """Show a pushed run view: the graph and the run's details."""
        self.view = view
        run = view.get("run") or {}
        lineage = run.get("lineage") if isinstance(run.get("lineage"), dict) else {}
        source = lineage.get("forkedFrom") if isinstance(lineage, dict) else None
        fork = f" · fork of {plain(source.get('runId'))}" if isinstance(source, dict) else ""
        self.sub_title = f"{plain(run.get('workflow'))} · {plain(run.get('status'))}{fork}"
        self.query_one("#graph", Static).update(render_run_graph(view.get("graph") or {}))
        self.query_one("#run", Static).update(render_run(run))

    def problem(self, message: str) -> None:
        """Say that the feed stopped."""
        self.query_one("#problem", Static).update(Text(message))

    @property
    def waiting(self) -> JsonObject | None:
        """What the shown run waits on, if anything."""
        run = (self.view or {}).get("run") or {}
        waiting = run.get("waitingOn")
        return waiting if isinstance(waiting, dict) else None

    def act(self, what: str, command: Callable[[Client], object]) -> None:
        """Send `command` from a worker thread on a client of its own; notify the outcome."""
        app = self.watch_app

        def send() -> None:
            try:
                with app.client() as client:
                    command(client)
            except ClientError as exc:
                app.call_from_thread(app.notify, exc.message, title=what, severity="error")
            else:
                app.call_from_thread(app.notify, f"{what}: done", title=self.run_id)

        self.run_worker(send, thread=True, name=what)

    def action_pause(self) -> None:
        """Pause the run."""
        self.act("pause", lambda client: client.pause(self.run_id))

    def action_resume(self) -> None:
        """Resume the run."""
        self.act("resume", lambda client: client.resume(self.run_id))

    def action_cancel_run(self) -> None:
        """Cancel the run, after a confirmation."""

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.act("cancel", lambda client: client.cancel(self.run_id, "cancelled in watch"))

        self.app.push_screen(ConfirmDialog(f"Cancel run {self.run_id}?"), confirmed)

    def action_answer(self) -> None:
        """Answer the checkpoint, or submit the agent step's output, that the run waits on
        with a JSON value; the dialog shows all the request asks (`cli/requests.py`)."""
        waiting = self.waiting
        kind = waiting.get("kind") if waiting is not None else None
        if waiting is None or kind not in _ANSWERABLE:
            self.app.notify(
                "the run is not waiting on a checkpoint or an agent step (a decision: d)",
                severity="warning",
            )
            return
        request_id = str(waiting.get("requestId"))
        rows = request_rows(kind, waiting.get("request"))
        step = kind != "checkpoint"
        title = f"{'Submit the output of' if step else 'Answer'} {plain(waiting.get('nodeId'))}"

        def answered(result: Any) -> None:
            if not isinstance(result, dict):
                return
            value = result["value"]
            if step:
                self.act(
                    "submit",
                    lambda client: client.submit(request_id, value, run_id=self.run_id),
                )
            else:
                self.act(
                    "answer",
                    lambda client: client.answer_checkpoint(self.run_id, value, request_id),
                )

        self.app.push_screen(AnswerDialog(title, rows), answered)

    def action_decide(self) -> None:
        """Choose in the human decision the run waits on, then confirm the choice."""
        waiting = self.waiting
        if waiting is None or waiting.get("kind") != "decision":
            self.app.notify("the run is not waiting on a decision", severity="warning")
            return
        request = waiting.get("request") or {}
        choices = [
            (str(c.get("id")), str(c.get("label") or c.get("id")))
            for c in (request.get("choices") or [])
            if isinstance(c, dict)
        ]
        request_id = str(waiting.get("requestId"))
        title = plain(request.get("title")) if isinstance(request, dict) else "Decide"

        def chosen(choice: str | None) -> None:
            if choice is None:
                return

            def confirmed(yes: bool | None) -> None:
                if yes:
                    self.act(
                        "decide",
                        lambda client: client.answer_decision(self.run_id, choice, request_id),
                    )

            self.app.push_screen(ConfirmDialog(f"Answer {title!r} with {choice!r}?"), confirmed)

        self.app.push_screen(ChoiceDialog(title, choices), chosen)

    def action_back(self) -> None:
        """Back to the run list: the one this run was opened from, or, when the view was
        opened on this run (`watch RUN`), a new one in its place (`q` quits)."""
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            app = self.watch_app
            self.app.switch_screen(RunsScreen(app.statuses, app.workflow))


class WatchApp(App[None]):
    """`pi-workflows watch [RUN]`: the run list, or one run, live."""

    CSS = _CSS
    TITLE = "pi-workflows"

    def __init__(
        self,
        home: Path,
        *,
        run_id: str | None = None,
        statuses: list[str] | None = None,
        workflow: str | None = None,
        client_factory: ClientFactory | None = None,
    ) -> None:
        super().__init__()
        self.home = home
        self.run_id = run_id
        self.statuses = statuses
        self.workflow = workflow
        self._factory = client_factory

    def client(self) -> Client:
        """A new client for this view's state directory (one per feed and per action)."""
        if self._factory is not None:
            return self._factory()
        return Client(self.home, client_id="cli")

    def on_mount(self) -> None:
        if self.run_id is not None:
            self.push_screen(RunScreen(self.run_id))
        else:
            self.push_screen(RunsScreen(self.statuses, self.workflow))
