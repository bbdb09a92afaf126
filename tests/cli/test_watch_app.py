"""`pi-workflows watch` driven by Textual's test pilot against a real server, and one tmux
smoke test of the real command in a terminal."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.text import Text
from textual.pilot import Pilot
from textual.widgets import DataTable, Input, Static

from pi_workflows.cli.watch_app import WatchApp
from pi_workflows.cli.watch_app.app import RunScreen, RunsScreen
from pi_workflows.cli.watch_app.dialogs import AnswerDialog
from pi_workflows.client import Client

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.timeout(120)

DECIDE = """
from pi_workflows import Workflow, checkpoint, choice, compute, human_decision, switch, edge

workflow = Workflow("decide", start="approve", nodes={
    "approve": human_decision(title=lambda ctx: "Ship it?",
                              choices=[choice("yes", "Ship"), choice("no", "Hold")]),
    "ship": compute(lambda ctx: {"shipped": True}),
    "hold": compute(lambda ctx: {"shipped": False}),
}, edges=[switch("approve", on="$.choice", cases={"yes": "ship", "no": "hold"})])
"""
SLOW = """
import time
from pi_workflows import Workflow, checkpoint, compute, edge

def nap(ctx):
    for _ in range(600):
        if ctx.cancellation.is_set():
            break
        time.sleep(0.05)
    return {"napped": True}

workflow = Workflow("slow", start="ask", nodes={
    "ask": checkpoint(lambda ctx: {"question": "Nap?"}),
    "nap": compute(nap),
}, edges=[edge("ask", "nap")])
"""


STEP = """
from pi_workflows import Workflow, agent, compute, edge

COUNT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

workflow = Workflow("step", start="count", nodes={
    "count": agent(lambda ctx: "Count the files", output=COUNT),
    "done": compute(lambda ctx: ctx.outputs["count"]),
}, edges=[edge("count", "done")])
"""

COUNT = """
import os, time
from pi_workflows import Workflow, action, idempotent_effect

def count(ctx):
    for done in range(1, 1001):
        ctx.publish_update({"done": done, "total": 1000})
    while not os.path.exists(ctx.input["go"]) and not ctx.cancellation.is_set():
        time.sleep(0.05)
    return {"counted": 1000}

workflow = Workflow("count", start="count", nodes={
    "count": action(count, effect=idempotent_effect("count")),
})
"""

SLOWS = """
from pi_workflows import Workflow, fan_out

workflow = Workflow("slows", start="each", nodes={
    "each": fan_out("slow", items=lambda ctx: [1, 2, 3], concurrency=3)})
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A running server with the `decide` and `slow` workflows."""
    process = ServerProcess(tmp_path)
    process.write_workflow("decide", DECIDE)
    process.write_workflow("slow", SLOW)
    process.write_workflow("slows", SLOWS)
    process.write_workflow("step", STEP)
    process.write_workflow("count", COUNT)
    process.start()
    yield process
    process.cleanup()


async def until(pilot: Pilot[None], check: Callable[[], Any], what: str) -> Any:
    """Let the app run until `check()` is truthy (views arrive from the server), at most
    30 seconds."""
    deadline = time.monotonic() + 30
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def drive(app: WatchApp, script: Callable[[Pilot[None]], Awaitable[None]]) -> None:
    """Run `script` against `app` in Textual's headless test harness."""

    async def main() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await script(pilot)

    asyncio.run(main())


def shown(app: WatchApp, widget_id: str) -> str:
    """The plain text a screen's Static widget shows now."""
    content = app.screen.query_one(widget_id, Static).content
    if isinstance(content, Text | str):
        return str(content)
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(content)
    return console.export_text()


def run_status(app: WatchApp) -> str | None:
    """The status of the run the run screen shows, once a view arrived."""
    screen = app.screen
    if isinstance(screen, RunScreen) and screen.view is not None:
        return str(screen.view["run"]["status"])
    return None


def test_the_list_shows_runs_live_and_enter_opens_one(server: ServerProcess) -> None:
    """A run started while the list is open appears; enter shows its graph and details."""
    app = WatchApp(server.home, client_factory=server.client)

    async def script(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), "the list")
        run_id = server.start_run("slow")
        table = app.screen.query_one("#runs", DataTable)
        await until(pilot, lambda: run_id in table.rows and "waiting" in shown(app, "#counts"),
                    "the run in the list")  # fmt: skip
        await pilot.press("enter")
        await until(pilot, lambda: run_status(app) == "waiting", "the run view")
        graph = shown(app, "#graph")
        assert "◆ ask checkpoint waiting" in graph
        assert "○ nap compute pending" in graph
        assert "└→ nap" in graph
        assert run_id in shown(app, "#run")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), "back to the list")

    drive(app, script)


def test_escape_on_a_run_opened_directly_goes_to_the_run_list(server: ServerProcess) -> None:
    """`watch RUN` then escape shows the run list (as the footer says), not an exit; enter
    opens the run again and escape comes back to that list."""
    run_id = server.start_run("slow")
    server.wait_status(run_id, "waiting")
    app = WatchApp(server.home, run_id=run_id, client_factory=server.client)

    async def script(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: run_status(app) == "waiting", "the run view")
        footer = app.screen.active_bindings
        assert footer["escape"].binding.description == "runs"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), "the run list")
        table = app.screen.query_one("#runs", DataTable)
        await until(pilot, lambda: run_id in table.rows, "the run in the list")
        assert app.is_running
        await pilot.press("enter")
        await until(pilot, lambda: run_status(app) == "waiting", "the run again")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), "back to the list")
        assert len(app.screen_stack) == 2

    drive(app, script)


def test_answer_pause_resume_and_a_confirmed_cancel(server: ServerProcess) -> None:
    """`a` answers the checkpoint; `p`/`r` pause and resume; `c` cancels only after `y`."""
    run_id = server.start_run("slow")
    server.wait_status(run_id, "waiting")
    app = WatchApp(server.home, run_id=run_id, client_factory=server.client)

    async def script(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: run_status(app) == "waiting", "the run view")
        await pilot.press("a")
        await pilot.press(*'"now"', "enter")
        await until(pilot, lambda: run_status(app) == "running", "the answer")
        await until(pilot, lambda: "◐ nap compute running" in shown(app, "#graph"), "nap running")
        await pilot.press("p")
        await until(pilot, lambda: run_status(app) == "paused", "the pause")
        await pilot.press("r")
        await until(pilot, lambda: run_status(app) in ("queued", "running"), "the resume")
        await pilot.press("c", "n")  # declined: nothing is sent
        await pilot.press("c", "y")
        await until(pilot, lambda: run_status(app) == "cancelled", "the cancel")

    drive(app, script)
    with Client(server.home, autostart=False) as client:
        events = [event["type"] for event in client.history(run_id)]
    assert events.count("run.cancelled") == 1
    assert "run.paused" in events or "run.parked" in events
    assert "run.resumed" in events


def test_answer_submits_an_agent_steps_output_by_hand(server: ServerProcess) -> None:
    """On a run waiting on an agent step, the details show its prompt and expected output,
    and `a` opens a dialog with both (and the schema): a wrong output is rejected with the
    path of the wrong field and the step stays open; a right one is submitted and the run
    goes on."""
    run_id = server.start_run("step")
    server.wait_status(run_id, "waiting")
    app = WatchApp(server.home, run_id=run_id, client_factory=server.client)

    def rejections() -> list[tuple[Any, ...]]:
        return server.query("SELECT error FROM interactive_submissions WHERE status = 'rejected'")

    async def submit(pilot: Pilot[None], value: str) -> None:
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AnswerDialog), "the dialog")
        app.screen.query_one("#value", Input).value = value
        await pilot.press("enter")

    async def script(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: run_status(app) == "waiting", "the run view")
        details = shown(app, "#run")
        assert "prompt      Count the files" in details
        assert "expected    A JSON object with these fields:" in details
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AnswerDialog), "the dialog")
        asked = shown(app, "#request")
        assert "prompt: Count the files" in asked
        assert "- n (integer, required)" in asked
        assert "It must match this JSON Schema:" in asked
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), "the dialog closed")
        await submit(pilot, '{"n": "two"}')
        await until(pilot, rejections, "the rejection")
        await until(pilot, lambda: run_status(app) == "waiting", "the step open again")
        await submit(pilot, '{"n": 2}')
        await until(pilot, lambda: run_status(app) == "completed", "the submission")

    drive(app, script)
    assert rejections() == [
        (
            "the output does not match the step's schema: output.n: 'two' is not of type"
            " 'integer'; correct it and submit again",
        )
    ]
    assert server.run(run_id)["output"] == {"n": 2}


def test_deciding_asks_for_a_choice_and_a_confirmation(server: ServerProcess) -> None:
    """`d` lists the decision's choices; the chosen one is sent only once confirmed."""
    run_id = server.start_run("decide")
    server.wait_status(run_id, "waiting")
    app = WatchApp(server.home, run_id=run_id, client_factory=server.client)

    async def script(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: run_status(app) == "waiting", "the run view")
        await pilot.press("d", "down", "enter", "n")  # "no" chosen, then declined
        await pilot.pause(0.2)
        assert run_status(app) == "waiting"
        await pilot.press("d", "enter", "y")  # "yes" chosen and confirmed
        await until(pilot, lambda: run_status(app) == "completed", "the decision")
        assert "● ship compute completed" in shown(app, "#graph")
        assert "○ hold compute pending" in shown(app, "#graph")

    drive(app, script)
    assert server.run(run_id)["output"] == {"shipped": True}


def test_watch_runs_in_a_real_terminal(server: ServerProcess, tmp_path: Path) -> None:
    """Smoke: the real command draws the run's graph in tmux and quits on `q`."""
    run_id = server.start_run("slow")
    server.wait_status(run_id, "waiting")
    # A private tmux server: its socket lives in this test's own directory, never in the
    # shared /tmp/tmux-UID/ where another worker or checkout could hold the same name.
    sockets = tmp_path / "tmux"
    sockets.mkdir()
    command = f"{sys.executable} -m pi_workflows.cli.main --home {server.home} watch {run_id}"
    env = {**server.env, "TERM": "xterm-256color", "TMUX_TMPDIR": str(sockets)}
    env.pop("TMUX", None)  # run from inside tmux, the new server must still be our own

    def tmux(*args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", "watch", *args], capture_output=True, text=True, check=False,
            timeout=30, env=env,
        ).stdout  # fmt: skip

    tmux("new-session", "-d", "-s", "watch", "-x", "110", "-y", "35", command)
    try:
        screen = wait_for(
            lambda: (
                (text := tmux("capture-pane", "-p", "-t", "watch"))
                and "ask checkpoint waiting" in text
                and text
            ),
            30,
            "the watch view to draw",
        )
        assert run_id in screen
        assert "nap" in screen
        tmux("send-keys", "-t", "watch", "q")
        wait_for(lambda: "watch" not in tmux("list-sessions"), 30, "the view to quit")
    finally:
        tmux("kill-server")


def test_the_list_shows_a_parent_with_its_progress_and_its_view_lists_the_children(
    server: ServerProcess,
) -> None:
    """Child runs are not rows of the list; their parent's status says how far they are,
    and the parent's view lists them with their status."""
    app = WatchApp(server.home, client_factory=server.client)

    async def script(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), "the list")
        parent = server.start_run("slows")
        table = app.screen.query_one("#runs", DataTable)
        await until(pilot, lambda: parent in table.rows and len(server.query(
            "SELECT 1 FROM interactive_requests WHERE status = 'pending'")) == 3,
            "the parent and its three waiting children")  # fmt: skip
        assert list(table.rows) == [parent]
        await until(pilot, lambda: "0/3 completed" in str(table.get_row(parent)[2]), "its progress")
        await pilot.press("enter")
        await until(pilot, lambda: run_status(app) == "waiting", "the parent's view")
        details = shown(app, "#run")
        assert "Children of each (fan_out of slow): 3 waiting of 3" in details
        children = server.query("SELECT run_id FROM runs WHERE parent_run_id = ?", parent)
        assert len(children) == 3
        assert all(child in details for (child,) in children)
        assert "Child runs that need a person" in details

    drive(app, script)


def test_the_run_view_shows_a_nodes_latest_progress_while_it_runs(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A node that published 1,000 updates and still runs: its run view shows the last value
    (which history does not keep, so no revision moved for it) with the count; it stays
    once the run completed."""
    go = tmp_path / "go"
    run_id = server.start_run("count", {"go": str(go)})
    app = WatchApp(server.home, run_id=run_id, client_factory=server.client)
    latest = '{"done":1000,"total":1000}'

    async def script(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: latest in shown(app, "#run"), "the latest progress value")
        assert run_status(app) == "running"
        details = shown(app, "#run")
        assert f"count: {latest} (1000 published, at " in details
        updates = server.query(
            "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'node.update'", run_id
        )
        assert updates == [(1,)]  # the first value only: the latest came without an event
        go.touch()
        await until(pilot, lambda: run_status(app) == "completed", "the run's end")
        assert f"count: {latest} (1000 published, at " in shown(app, "#run")

    drive(app, script)


def test_the_list_marks_a_fork_and_its_view_shows_what_it_carried(server: ServerProcess) -> None:
    """A fork's row says `(fork)` after its status; its view's title names its source, and
    its graph marks the node it carried from the source `(carried)`."""
    source = server.start_run("decide")
    server.wait_status(source, "waiting")
    with server.client() as client:
        client.answer_decision(source, "no")
        server.wait_status(source, "completed")
        fork = str(client.fork(source, "hold")["runId"])
    server.wait_status(fork, "completed")
    app = WatchApp(server.home, client_factory=server.client)

    async def script(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen), "the list")
        table = app.screen.query_one("#runs", DataTable)
        await until(pilot, lambda: fork in table.rows, "the fork in the list")
        assert "(fork)" in str(table.get_row(fork)[2])
        assert "(fork)" not in str(table.get_row(source)[2])
        table.move_cursor(row=table.get_row_index(fork))
        await pilot.press("enter")
        await until(pilot, lambda: run_status(app) == "completed", "the fork's view")
        assert app.screen.sub_title.endswith(f"fork of {source}")
        graph = shown(app, "#graph")
        assert "approve human_decision completed (carried)" in graph
        assert "hold compute completed\n" in graph

    drive(app, script)
