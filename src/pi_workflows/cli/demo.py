"""The `make demo` tour: start a server, run `builtin:demo`, answer its checkpoint, check state.

Run it with `python -m pi_workflows.cli.demo`. It uses a private temporary state directory
unless `PI_WORKFLOWS_HOME` is set, starts the server on demand, follows the run by polling,
answers the run's checkpoint itself as a person would with `pi-workflows checkpoint answer`,
prints the final run, runs `state.diagnose`, names the other built-ins to try next (it runs
no model: see docs/builtins.md, "make demo"), and stops the server if it started it. It exits
0 only if the run completed and diagnose found nothing. It talks to the server only through
`pi_workflows.client`, and gives up after `DEMO_TIMEOUT` seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.text import Text

from pi_workflows.cli.errors import DemoError
from pi_workflows.cli.output import format_time, render_problems, status_text
from pi_workflows.cli.show import render_run
from pi_workflows.cli.waiting import POLL_INTERVAL, TERMINAL_STATUSES
from pi_workflows.client import (
    Client,
    ClientError,
    JsonObject,
    ServerInfo,
    ensure_server,
    state_home,
)

__all__ = ["DEMO_ANSWER", "DEMO_INPUT", "DEMO_TIMEOUT", "main"]

DEMO_WORKFLOW: Final = "builtin:demo"
DEMO_INPUT: Final[JsonObject] = {"items": [5, 3, 8, 1], "greeting": "hello"}
DEMO_ANSWER: Final[JsonObject] = {"answer": "yes, from the demo"}
"""The checkpoint's answer; the built-in puts it in its report as `answer`."""
DEMO_TIMEOUT: Final = 120.0
"""Seconds the whole demo may take before it gives up."""

_STOP_AT: Final = TERMINAL_STATUSES | {"paused", "ambiguous"}
_NOT_SUGGESTED: Final = frozenset({"demo", "review-file"})
"""Built-ins the closing list leaves out: this one, and the step `builtin:review` runs."""


class _Demo:
    """One demo session: its state directory, client, and what it must clean up."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.deadline = self.started + DEMO_TIMEOUT
        self.temporary: Path | None = None
        self.server: ServerInfo | None = None
        self.client: Client | None = None

    # -- steps --------------------------------------------------------------------------

    def choose_home(self) -> Path:
        if os.environ.get("PI_WORKFLOWS_HOME"):
            home = state_home()
            self.say(f"Using the state directory {home} (from PI_WORKFLOWS_HOME).")
        else:
            home = Path(tempfile.mkdtemp(prefix="pi-workflows-demo-"))
            self.temporary = home
            self.say(
                f"Using a private temporary state directory {home} "
                "(set PI_WORKFLOWS_HOME to use another)."
            )
        return home

    def start_server(self, home: Path) -> Client:
        self.server = ensure_server(home, timeout=min(30.0, self.remaining()))
        how = "Started" if self.server.started else "Using the running"
        self.say(
            f"{how} server: pid {self.server.pid}, epoch {self.server.epoch}, "
            f"log {self.server.log_path}."
        )
        self.client = Client(home, client_id=f"demo-{uuid.uuid4()}", timeout=15.0)
        return self.client

    def run_demo(self, client: Client) -> JsonObject:
        receipt = client.start_run(DEMO_WORKFLOW, DEMO_INPUT)
        run_id = str(receipt["runId"])
        self.say(f"Started {DEMO_WORKFLOW} as run {run_id} with input {json.dumps(DEMO_INPUT)}.")
        answered: set[str] = set()
        last: tuple[Any, Any] | None = None
        while True:
            view = client.get_run(run_id)
            status, node = view.get("status"), view.get("currentNode")
            if (status, node) != last:
                last = (status, node)
                self.progress(view)
            if status in _STOP_AT:
                return view
            if status == "waiting":
                self.answer(client, view, answered)
            if time.monotonic() >= self.deadline:
                raise DemoError(
                    f"gave up after {DEMO_TIMEOUT:g} s: run {run_id} is still {status} "
                    f"at node {node}"
                )
            time.sleep(POLL_INTERVAL)

    def answer(self, client: Client, view: JsonObject, answered: set[str]) -> None:
        waiting = view.get("waitingOn")
        if not isinstance(waiting, dict):
            return  # the wait is committed but not projected yet; look again
        request_id = waiting.get("requestId")
        if not isinstance(request_id, str) or request_id in answered:
            return
        if waiting.get("kind") != "checkpoint":
            raise DemoError(
                f"the run waits on a {waiting.get('kind')!r} the demo cannot answer "
                f"(request {request_id})"
            )
        request = waiting.get("request")
        question = request.get("question") if isinstance(request, dict) else None
        self.say(f"The run asks: {question if question is not None else request}")
        self.say(f"Answering as a person would: {json.dumps(DEMO_ANSWER)}")
        client.answer_checkpoint(str(view.get("runId")), DEMO_ANSWER, request_id=request_id)
        answered.add(request_id)

    def check_state(self, client: Client) -> bool:
        problems = client.diagnose()
        if problems:
            self.console.print(render_problems(problems))
            self.say(f"state.diagnose found {len(problems)} problem(s).")
            return False
        self.say("state.diagnose: the state is clean (no problems).")
        return True

    def suggest(self, client: Client) -> None:
        """Name the other built-ins, with what each does, and how to start one (no run)."""
        found = [
            w
            for w in client.list_workflows(None)
            if w.get("origin") == "builtin" and w.get("name") not in _NOT_SUGGESTED
        ]
        if not found:
            return
        self.say("Built-in workflows to try next (docs/builtins.md):")
        for workflow in found:
            self.say(f"  builtin:{workflow.get('name')}  {workflow.get('summary') or ''}")
        self.say(
            "Start one in Pi with /workflow start builtin:NAME {...}, or with"
            " pi-workflows run start builtin:NAME --project . --input '{...}'."
        )

    def clean_up(self, keep: bool) -> None:
        if self.client is not None:
            self.client.close()
        if self.server is not None and self.server.started:
            try:
                with Client(self.server.socket_path.parent, autostart=False) as stopper:
                    # A fresh connection: the demo's own one may be mid-retry after an error.
                    stopper.stop(wait=True, timeout=30.0)
                self.say(f"Stopped the server the demo started (pid {self.server.pid}).")
            except ClientError as exc:
                self.say(f"Could not stop the server (pid {self.server.pid}): {exc.message}")
                keep = True
        if self.temporary is not None:
            if keep:
                self.say(f"Kept {self.temporary} for inspection.")
            else:
                shutil.rmtree(self.temporary, ignore_errors=True)

    # -- output -------------------------------------------------------------------------

    def remaining(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def say(self, message: str) -> None:
        self.console.print(Text(message), soft_wrap=True)

    def progress(self, view: JsonObject) -> None:
        line = Text(f"  {time.monotonic() - self.started:6.1f}s  ")
        line.append(status_text(view.get("status")))
        node = view.get("currentNode")
        if node:
            line.append(f"  at node {node}")
        self.console.print(line, soft_wrap=True)


def main() -> int:
    """Run the demo and return its exit status (0: completed and clean)."""
    console = Console(highlight=False)
    demo = _Demo(console)
    ok = False
    try:
        client = demo.start_server(demo.choose_home())
        view = demo.run_demo(client)
        console.print(render_run(view))
        completed = view.get("status") == "completed"
        if not completed:
            demo.say(f"The run ended {view.get('status')}, not completed.")
        else:
            demo.say(f"The run completed at {format_time(view.get('finishedAt'))}.")
        clean = demo.check_state(client)
        ok = completed and clean
        if ok:
            demo.suggest(client)
    except (ClientError, DemoError) as exc:
        console.print(Text(f"pi-workflows demo: error: {exc}", style="red"), soft_wrap=True)
    except KeyboardInterrupt:
        console.print(Text("pi-workflows demo: interrupted", style="red"))
    finally:
        demo.clean_up(keep=not ok)
    demo.say("Demo finished: OK." if ok else "Demo finished: FAILED.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
