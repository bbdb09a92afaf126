"""Section 6: the Pi bridge, through the real ``pi`` binary and a scripted model.

Runs in the bench process. One server; per repetition a new Pi in RPC mode (the pinned Pi of
``integrations/pi``, only our extension, a private HOME, ``PI_OFFLINE=1``) on a new session,
and the scripted OpenAI-compatible model of ``tests/pi/support/mock_provider.py``, which
stamps ``CLOCK_MONOTONIC`` when it receives the step and when it answers with the tool call
that submits it. The workflow is one agent step, then a compute node that stamps its start.

- ``piStartToStepMs``: a run is waiting on its step, Pi is spawned on the run's origin
  session, and the step reaches the model (Pi's start, the extension's attach, its branch
  report and watch, the pushed view, the presentation turn's model request).
- ``runStartToStepMs``: with that Pi warm and idle, ``run.start`` sent to the step reaching
  the model (resolver, runner, the committed request, the pushed view, the turn).
- ``submitToNextNodeMs``: the model's submitting tool call sent to the next node's stamp (Pi
  runs the tool, the server records the submission, a validation runner accepts it and goes
  on to the next node). Both runs of a repetition are measured.

Skipped with one line when ``integrations/pi/node_modules`` is missing (``make pi-deps``).
"""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from bench.context import Context
from bench.ourserver import TERMINAL, BenchError, OurServer
from bench.stats import figure

REPO = Path(__file__).resolve().parents[2]
PI_DIR = REPO / "integrations" / "pi"

if TYPE_CHECKING:
    from pi.support.mock_provider import ChatRequest, MockProvider, Reply
    from pi.support.pi_rpc import PiProcess

STEP_MARK = "--- Workflow step ---"
TERMINAL_MARK = "--- Workflow run finished ---"
REQUEST_ID = re.compile(r"\breq_[0-9A-Za-z]+")
RUN_ID = re.compile(r"\brun_[0-9a-z]+")
WAIT_SECONDS = 60.0

_STEP = '''"""Bench: one agent step the model submits, then a node that stamps its start."""

import time

from pi_workflows import Workflow, agent, compute, edge

workflow = Workflow(
    "pistep",
    start="ask",
    nodes={
        "ask": agent(prompt="Pick a route", expected_output='{"route": "fix"}'),
        "next": compute(lambda ctx: {"t": time.monotonic_ns()}),
    },
    edges=[edge("ask", "next")],
)
'''


def _support() -> Any:
    """The test suite's Pi driver and scripted model (one implementation for both)."""
    tests = str(REPO / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from pi.support import mock_provider, pi_rpc

    return mock_provider, pi_rpc


class _Model:
    """The scripted model's rules, with the stamps the section reads."""

    def __init__(self, provider: MockProvider) -> None:
        mock, _ = _support()
        self.reply = mock.Reply
        self.step_seen: dict[str, int] = {}
        self.submitted: dict[str, int] = {}
        self.presented: set[str] = set()
        self.changed = threading.Condition()
        provider.on(mock.user_text_contains(TERMINAL_MARK), self._result)
        provider.on(mock.last_is_tool_result, mock.text("Submitted."))
        provider.on(mock.user_text_contains(STEP_MARK), self._submit)

    def _submit(self, request: ChatRequest) -> Reply:
        seen = time.monotonic_ns()
        match = REQUEST_ID.search(request.last_user_text())
        if not match:
            raise BenchError("the step text names no request id")
        request_id = match.group(0)
        arguments = {"action": "submit", "requestId": request_id, "output": {"route": "fix"}}
        with self.changed:
            self.step_seen[request_id] = seen
            self.submitted[request_id] = time.monotonic_ns()
            self.changed.notify_all()
        return cast("Reply", self.reply(tool_name="workflow", tool_arguments=arguments))

    def _result(self, request: ChatRequest) -> Reply:
        match = RUN_ID.search(request.last_user_text())
        with self.changed:
            if match:
                self.presented.add(match.group(0))
            self.changed.notify_all()
        return cast("Reply", self.reply(text="The run finished."))

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        with self.changed:
            while not ready():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(f"{what} never reached the model")
                self.changed.wait(left)

    def wait_step(self, request_id: str) -> int:
        """The monotonic time the model received `request_id`'s step."""
        self._wait(lambda: request_id in self.step_seen, f"the step {request_id}")
        return self.step_seen[request_id]

    def wait_result(self, run_id: str) -> None:
        """Wait until the model was asked to present `run_id`'s result."""
        self._wait(lambda: run_id in self.presented, f"the result of {run_id}")


def _waiting_request(server: OurServer, run_id: str) -> str:
    """The run's agent request, once it exists. With a warm Pi the step can be presented,
    submitted and accepted between two polls, so a finished run's request is read from its
    history rather than waited for as `waiting`."""
    view = server.wait_run(run_id, frozenset({"waiting"}) | TERMINAL, timeout=WAIT_SECONDS)
    if view.get("status") == "waiting":
        return str(view["waitingOn"]["requestId"])
    for event in server.client.history(run_id):
        data = event.get("data")
        if isinstance(data, dict) and isinstance(data.get("requestId"), str):
            return str(data["requestId"])
    raise BenchError(f"run {run_id} ended {view.get('status')} without an agent request")


def _next_node_ms(server: OurServer, model: _Model, run_id: str, request_id: str) -> float:
    view = server.wait_run(run_id, timeout=WAIT_SECONDS)
    if view.get("status") != "completed":
        raise BenchError(f"run {run_id} ended {view.get('status')}: {view.get('error')}")
    return (int(view["output"]["t"]) - model.submitted[request_id]) / 1e6


def _idle(pi: PiProcess, model: _Model, run_id: str) -> None:
    """Wait until `run_id`'s result was presented and Pi is not streaming any more."""
    model.wait_result(run_id)
    deadline = time.monotonic() + WAIT_SECONDS
    while pi.command({"type": "get_state"})["data"]["isStreaming"]:
        if time.monotonic() > deadline:
            raise BenchError("Pi did not become idle")
        time.sleep(0.02)


def _repetition(
    directory: Path,
    server: OurServer,
    provider: MockProvider,
    model: _Model,
    workflow: str,
    rep: int,
) -> dict[str, list[float]]:
    session = f"bench-pi-{rep}"
    first = str(server.client.start_run(workflow, {}, origin_session=session)["runId"])
    first_request = _waiting_request(server, first)
    root = directory / f"rep{rep}"
    root.mkdir()
    _, pi_rpc = _support()
    pi = pi_rpc.PiProcess(
        root,
        provider,
        cwd=server.project,
        env={"PI_WORKFLOWS_HOME": str(server.home)},
        session_id=session,
    )
    spawned = time.monotonic_ns()
    pi.start()
    try:
        presented = model.wait_step(first_request)
        values = {
            "piStartToStepMs": [(presented - spawned) / 1e6],
            "submitToNextNodeMs": [_next_node_ms(server, model, first, first_request)],
        }
        _idle(pi, model, first)
        t0 = time.monotonic_ns()
        second = str(server.client.start_run(workflow, {}, origin_session=session)["runId"])
        second_request = _waiting_request(server, second)
        values["runStartToStepMs"] = [(model.wait_step(second_request) - t0) / 1e6]
        values["submitToNextNodeMs"].append(_next_node_ms(server, model, second, second_request))
        _idle(pi, model, second)
    finally:
        pi.stop()
    return values


def run(ctx: Context) -> dict[str, Any]:
    """Measure and summarise; see the module docstring."""
    if not (PI_DIR / "node_modules" / ".bin" / "pi").exists():
        reason = (
            "integrations/pi/node_modules is missing; run `make pi-deps` to measure the Pi bridge"
        )
        ctx.say(f"pi: skipped: {reason}")
        return {"skipped": reason}
    directory = ctx.section_dir("pi")
    server = OurServer(ctx.procs, directory / "ours").start()
    (server.project / ".pi" / "workflows").mkdir(parents=True, exist_ok=True)
    path = server.project / ".pi" / "workflows" / "pistep.workflow.py"
    path.write_text(_STEP)
    series: dict[str, list[float]] = {
        "piStartToStepMs": [],
        "runStartToStepMs": [],
        "submitToNextNodeMs": [],
    }
    try:
        mock, _ = _support()
        with mock.MockProvider() as provider:
            model = _Model(provider)
            for rep in range(ctx.sizes.warmup + ctx.sizes.pi_reps):
                measured = rep >= ctx.sizes.warmup
                ctx.say(
                    f"pi: {'rep ' + str(rep - ctx.sizes.warmup + 1) if measured else 'warm-up'}"
                )
                values = _repetition(directory, server, provider, model, str(path), rep)
                if measured:
                    for key, found in values.items():
                        series[key].extend(found)
    finally:
        server.stop()
    return {
        "method": (
            "a new Pi (RPC mode, scripted model) per repetition on a warm server; "
            "model-side stamps on CLOCK_MONOTONIC"
        ),
        "reps": ctx.sizes.pi_reps,
        "ours": {key: figure(values) for key, values in series.items()},
    }
