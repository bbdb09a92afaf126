"""Child runs with the real Pi: sub-agents of a fan_out, and how the origin session shows them.

The server of these tests runs the real Pi binary as its headless agent
(``PI_WORKFLOWS_PI``, as in ``test_detached.py``), and the person's Pi is a real Pi in RPC
mode on the origin session; both talk to the one scripted model. The tests check that a
``fan_out(..., detached=True)`` gives each child a headless Pi of its own whose steps are in
flight at the same time, that the parent's next agent step in the origin session reads the
children's outputs, that every headless Pi is gone afterwards and the origin session never
saw a child's step; and that the widget and status line of a session whose run fans out in it
show the parent only, with its children's progress and the active child step on its line.
``widgetLines`` and ``statusText`` are also evaluated directly under the pinned Node for the
shapes a real run cannot be steered into reliably.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from pi.support.mock_provider import (
    MODEL_ID,
    PROVIDER,
    ChatRequest,
    MockProvider,
    Reply,
    last_is_tool_result,
    request_id_in,
    text,
    user_text_contains,
)
from pi.support.pi_rpc import PI_DIR, MakePi, PiProcess, Record, node_bin, pi_binary, require_pi
from pi.support.records import content_text, session_file, tool_results, workflow_messages
from pi_workflows.protocol.process_start import process_start

from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SESSION = "children-origin"
STEP_MARK = "--- Workflow step ---"
TERMINAL_MARK = "--- Workflow run finished ---"
CHILD_MARK = "[child run of "
HOLD_SECONDS = 120.0
"""How long a held model reply waits for the others (three cold Pi starts on busy cores)."""

SCOUT = """
from pi_workflows import Workflow, agent, compute, edge


def check(ctx):
    if ctx.input["area"] == "bad":
        raise ValueError("the area bad cannot be scouted")
    return {"area": ctx.input["area"]}


workflow = Workflow(
    "scout",
    start="check",
    nodes={
        "check": compute(check),
        "look": agent(prompt=lambda ctx: "Scout area " + ctx.outputs["check"]["area"] + ".",
                      expected_output='{"finding": "area NAME is clear"}'),
    },
    edges=[edge("check", "look")],
)
"""

SURVEY = """
from pi_workflows import Workflow, agent, compute, edge, fan_out


def summarize_prompt(ctx):
    lines = ["Finding: " + child["output"]["finding"] for child in ctx.outputs["each"]]
    return "Summarize the findings of the scouts.\\n" + "\\n".join(lines)


workflow = Workflow(
    "survey",
    start="each",
    nodes={
        "each": fan_out("scout", items=lambda ctx: ctx.input["areas"],
                        input=lambda ctx, area: {"area": area}, concurrency=3, detached=True),
        "summarize": agent(prompt=summarize_prompt, expected_output='{"summary": "..."}'),
        "done": compute(lambda ctx: {
            "summary": ctx.outputs["summarize"]["summary"],
            "children": [child["runId"] for child in ctx.outputs["each"]],
        }),
    },
    edges=[edge("each", "summarize"), edge("summarize", "done")],
)
"""

CREW = """
from pi_workflows import Workflow, compute, fan_out, switch


def report(ctx):
    children = ctx.results["each"]["details"]["children"]
    return {
        "outcomes": [child["outcome"] for child in children],
        "findings": [(child["output"] or {}).get("finding") for child in children],
    }


workflow = Workflow(
    "crew",
    start="each",
    nodes={
        "each": fan_out("scout", items=lambda ctx: ctx.input["areas"],
                        input=lambda ctx, area: {"area": area}, concurrency=3),
        "all": compute(lambda ctx: {"findings": [c["output"]["finding"]
                                                 for c in ctx.outputs["each"]]}),
        "report": compute(report),
    },
    edges=[switch("each", on="$result.outcome", cases={"ok": "all", "failed": "report"})],
)
"""


@pytest.fixture
def server(root: Path, provider: MockProvider) -> Iterator[ServerProcess]:
    """A started server whose headless agents are the real Pi, and whose user's Pi
    configuration (``~/.pi/agent`` of the server's ``HOME``) selects the scripted model."""
    process = ServerProcess(
        root,
        env={
            "PI_WORKFLOWS_PI": str(pi_binary()),
            "PATH": f"{node_bin()}{os.pathsep}{os.environ.get('PATH', '')}",
            "PI_OFFLINE": "1",
            "PI_TELEMETRY": "0",
            "PI_SKIP_VERSION_CHECK": "1",
            "NO_COLOR": "1",
        },
    )
    process.env.pop("PI_CODING_AGENT_DIR", None)  # the agents must use the user's ~/.pi/agent
    agent_dir = process.user_home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    (agent_dir / "models.json").write_text(json.dumps(provider.models_json()))
    settings = {
        "defaultProvider": PROVIDER,
        "defaultModel": MODEL_ID,
        "quietStartup": True,
        "retry": {"enabled": False},
    }
    (agent_dir / "settings.json").write_text(json.dumps(settings))
    process.write_workflow("scout", SCOUT)
    process.write_workflow("survey", SURVEY)
    process.write_workflow("crew", CREW)
    try:
        yield process.start()
    finally:
        process.cleanup()


# --- helpers ---------------------------------------------------------------------------------


def area_in(request: ChatRequest) -> str:
    """The area a scout's step names (`Scout area NAME.`)."""
    match = re.search(r"Scout area (\w+)\.", request.last_user_text())
    assert match, request.last_user_text()
    return match.group(1)


def submit(request: ChatRequest, output: dict[str, Any]) -> Reply:
    """A `workflow` tool call submitting `output` for the request id in the step text."""
    arguments = {
        "action": "submit",
        "requestId": request_id_in(request.last_user_text()),
        "output": output,
    }
    return Reply(tool_name="workflow", tool_arguments=arguments)


def finding(area: str) -> str:
    return f"area {area} is clear"


class Gate:
    """Holds each scout's model reply until `count` different steps have asked the model, so
    a reply leaves only while every one of them is in flight; records when each asked and
    when its reply left."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.cond = threading.Condition()
        self.asked: dict[str, float] = {}
        self.answered: dict[str, float] = {}
        self.all_in_flight: list[bool] = []

    def reply(self, request: ChatRequest) -> Reply:
        request_id = request_id_in(request.last_user_text())
        with self.cond:
            self.asked.setdefault(request_id, time.monotonic())
            self.cond.notify_all()
            met = self.cond.wait_for(lambda: len(self.asked) >= self.count, HOLD_SECONDS)
            self.all_in_flight.append(met)
            self.answered.setdefault(request_id, time.monotonic())
        return submit(request, {"finding": finding(area_in(request))})


def agent_rows(server: ServerProcess, run_id: str) -> list[tuple[int, float, str]]:
    """`(pid, process start, status)` of the run's recorded headless agents, oldest first."""
    return [
        (int(row[0]), float(row[1]), str(row[2]))
        for row in server.query(
            "SELECT pid, process_start, status FROM agent_processes WHERE run_id = ?"
            " ORDER BY started_at, rowid",
            run_id,
        )
    ]


def agent_alive(pid: int, start: float) -> bool:
    """True while the recorded agent (this pid with this start time) runs, or anything is
    left in its process group."""
    try:
        os.killpg(pid, 0)
        return True
    except ProcessLookupError:
        pass
    try:
        process = psutil.Process(pid)
        return process_start(pid) == start and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_agent_gone(server: ServerProcess, run_id: str) -> None:
    """Wait until every recorded headless agent of the run is stopped (its process group
    empty) and its record ended (a run that waits for a person holds none, so one agent may
    follow another)."""
    rows = agent_rows(server, run_id)
    assert rows, f"run {run_id} never had a headless agent"
    for pid, start, _status in rows:
        wait_for(lambda p=pid, s=start: not agent_alive(p, s), 30, f"the headless Pi {pid} to stop")
    wait_for(
        lambda: all(row[2] == "ended" for row in agent_rows(server, run_id)),
        30,
        "their records to end",
    )


def children_of(server: ServerProcess, parent: str) -> list[tuple[str, str, str, str]]:
    """`(run id, status, execution mode, origin session)` of the parent's children, in item
    order."""
    return [
        (str(row[0]), str(row[1]), str(row[2]), str(row[3]))
        for row in server.query(
            "SELECT r.run_id, r.status, r.execution_mode, r.origin_session FROM runs r"
            " JOIN run_children c ON c.child_run_id = r.run_id WHERE r.parent_run_id = ?"
            " ORDER BY c.item",
            parent,
        )
    ]


def widgets(pi: PiProcess) -> list[list[str]]:
    """The lines of every widget the extension showed, in order (`[]` for a cleared one)."""
    return [list(r.get("widgetLines") or []) for r in pi.ui_requests("setWidget")]


def statuses(pi: PiProcess) -> list[str]:
    """Every status line the extension showed, in order (`""` for a cleared one)."""
    return [str(r.get("statusText") or "") for r in pi.ui_requests("setStatus")]


def wait_widget_line(pi: PiProcess, pattern: str, what: str) -> str:
    """The first widget line that matches `pattern` (re.fullmatch), once one is shown."""
    compiled = re.compile(pattern)

    def found(record: Record) -> bool:
        if record.get("type") != "extension_ui_request" or record.get("method") != "setWidget":
            return False
        return any(compiled.fullmatch(line) for line in record.get("widgetLines") or [])

    record = pi.wait_for(found, 90, what)
    return next(line for line in record["widgetLines"] if compiled.fullmatch(line))


def attach(pi: PiProcess, server: ServerProcess) -> None:
    """Wait until Pi's coordinator is attached to `SESSION`."""
    wait_for(
        lambda: server.query("SELECT 1 FROM sessions WHERE session_id = ?", SESSION),
        60,
        "the origin session's coordinator to attach",
    )


# --- detached sub-agents in parallel, read by the origin session -----------------------------


def test_detached_sub_agents_work_at_once_and_the_origin_session_reads_their_outputs(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A run started from a person's Pi fans out to three detached scouts: each child gets a
    headless Pi of its own, and all three steps are in flight at the same time (the model
    holds each reply until all three asked). Joined, the parent's next agent step is presented
    in the origin session with the three outputs in its prompt; the person's model submits a
    summary of them and the run completes with it. Afterwards every headless Pi is gone,
    `state diagnose` is clean, and the origin session presented nothing of the children."""
    gate = Gate(3)
    provider.on(user_text_contains(CHILD_MARK), gate.reply, name="scout, held")

    def summarize(request: ChatRequest) -> Reply:
        found = re.findall(r"^Finding: (.+)$", request.last_user_text(), re.MULTILINE)
        return submit(request, {"summary": "; ".join(found)})

    provider.on(user_text_contains("Summarize the findings"), summarize, name="summary")
    provider.on(user_text_contains(TERMINAL_MARK), text("The survey finished."), name="terminal")
    provider.on(last_is_tool_result, text("Done."), name="after a tool result")
    pi = make_pi(session_id=SESSION)
    attach(pi, server)
    areas = ["north", "south", "west"]

    parent = server.start_run("survey", {"areas": areas}, origin_session=SESSION)

    waiting = wait_widget_line(
        pi, rf"  {parent} survey waiting at each 0/3 done", "the parent waiting on its scouts"
    )
    done = server.wait_status(parent, {"completed", "failed", "paused", "cancelled"}, 150)
    expected = "; ".join(finding(area) for area in areas)
    children = children_of(server, parent)
    assert (done["status"], done["output"]) == (
        "completed",
        {"summary": expected, "children": [child[0] for child in children]},
    ), done
    assert waiting
    # The three steps were in flight at once: no reply left before the last one asked.
    assert len(gate.asked) == 3, gate.asked
    assert gate.all_in_flight == [True, True, True], gate.all_in_flight
    assert max(gate.asked.values()) < min(gate.answered.values())
    assert [(status, mode, session) for _, status, mode, session in children] == [
        ("completed", "detached", f"detached-{run_id}") for run_id, *_ in children
    ]
    for item, (run_id, *_) in enumerate(children):
        stored = session_file(server.home / "agents" / run_id, f"detached-{run_id}")
        [step] = workflow_messages(stored, "step")
        assert content_text(step).startswith(
            f"[child run of {parent}: item {item + 1} of 3 of fan_out 'each']\n"
        )
        assert f"Scout area {areas[item]}." in content_text(step)
    # The origin's model saw the three outputs in the parent's next step, and submitted.
    [asked] = [r for r in provider.requests() if user_text_contains("Summarize the findings")(r)]
    for area in areas:
        assert f"Finding: {finding(area)}" in asked.last_user_text()
    # Pi reports the tool's end a moment after the server took the submission: wait for it.
    [submitted] = wait_for(lambda: tool_results(pi.records), 30, "the submission's tool result")
    assert submitted["isError"] is False, submitted
    # Every headless Pi is gone, one per child and none for the parent.
    for run_id, *_ in children:
        wait_agent_gone(server, run_id)
    assert agent_rows(server, parent) == []
    assert server.query("SELECT COUNT(*) FROM agent_processes WHERE status = 'live'") == [(0,)]
    # The origin session presented the parent's step and result, nothing of the children
    # (the result is presented after the run ended: wait for it).
    wait_for(lambda: workflow_messages(pi.entries(), "terminal"), 60, "the run's end message")
    entries = pi.entries()
    shown = workflow_messages(entries)
    assert [(m["details"]["kind"], m["details"]["runId"]) for m in shown] == [
        ("step", parent),
        ("terminal", parent),
    ]
    for area in areas:
        assert f"Finding: {finding(area)}" in content_text(shown[0])
    assert not [e for e in entries if CHILD_MARK in json.dumps(e)]
    assert {
        row[0]
        for row in server.query(
            "SELECT run_id FROM workflow_messages WHERE origin_session = ?", SESSION
        )
    } == {parent}
    assert not [line for lines in widgets(pi) for line in lines if CHILD_MARK in line]
    assert server.diagnose() == []


# --- the widget and status line of a session whose run fans out in it -------------------------


def test_the_widget_shows_a_fanning_out_parent_with_its_progress_and_its_childs_step(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """A fan_out whose children share the parent's origin session: the widget has one line,
    the parent's, never one of a child; it shows the children's progress after its status
    (`1/3 done, 1 failed` once a child failed) and, while a child's step is the session's
    active request, that step and child on the parent's line; the status line counts one run.
    Each child's step arrives labelled with its parent and item, no child's end is presented,
    and once the parent ends the widget and status line are cleared."""
    go = threading.Event()

    def scout(request: ChatRequest) -> Reply:
        go.wait(HOLD_SECONDS)
        return submit(request, {"finding": finding(area_in(request))})

    provider.on(user_text_contains(CHILD_MARK), scout, name="scout, held until the failure")
    provider.on(user_text_contains(TERMINAL_MARK), text("The crew finished."), name="terminal")
    provider.on(last_is_tool_result, text("Done."), name="after a tool result")
    pi = make_pi(session_id=SESSION)
    attach(pi, server)

    parent = server.start_run("crew", {"areas": ["north", "bad", "west"]}, origin_session=SESSION)

    line = wait_widget_line(
        pi,
        rf"  {parent} crew waiting at each 1/3 done, 1 failed — agent req_\w+ of child run run_\w+",
        "the parent's line with the failed child and the active child step",
    )
    go.set()
    done = server.wait_status(parent, {"completed", "failed", "paused", "cancelled"}, 120)
    assert (done["status"], done["output"]) == (
        "completed",
        {"outcomes": ["ok", "failed", "ok"], "findings": [finding("north"), None, finding("west")]},
    ), done
    children = children_of(server, parent)
    assert [status for _, status, _, _ in children] == ["completed", "failed", "completed"]
    assert {(mode, session) for _, _, mode, session in children} == {("attached", SESSION)}
    assert line.split(" — agent ")[1].split(" of child run ")[1] in {children[0][0], children[2][0]}
    wait_for(lambda: widgets(pi)[-1:] == [[]], 30, "the widget to be cleared")
    wait_for(lambda: statuses(pi)[-1:] == [""], 30, "the status line to be cleared")

    # One line per widget, the parent's; every child step was on it while it was active.
    child_ids = {run_id for run_id, *_ in children}
    shown = [lines for lines in widgets(pi) if lines]
    assert shown
    for lines in shown:
        assert lines[0] == "Workflows in this session:"
        assert len(lines) == 2, lines
        assert lines[1].startswith(f"  {parent} crew "), lines
        assert not any(lines[1].startswith(f"  {run_id} ") for run_id in child_ids)
    progress = [
        int(match.group(1))
        for lines in shown
        if (match := re.search(r" at each (\d)/3 done", lines[1]))
    ]
    assert progress == sorted(progress), progress
    steps = workflow_messages(pi.entries(), "step")
    assert [s["details"]["runId"] for s in steps] == [children[0][0], children[2][0]]
    for item, step in zip((1, 3), steps, strict=True):
        run_id, request_id = step["details"]["runId"], step["details"]["requestId"]
        assert content_text(step).startswith(
            f"[child run of {parent}: item {item} of 3 of fan_out 'each']\n"
        )
        assert any(
            re.fullmatch(
                rf"  {parent} crew waiting at each \d/3 done(, 1 failed)?"
                rf" — agent {request_id} of child run {run_id}",
                lines[1],
            )
            for lines in shown
        ), (request_id, shown)
    counted = [status for status in statuses(pi) if status]
    assert counted
    assert all(status.startswith("workflows: 1 active run") for status in counted), counted
    assert "workflows: 1 active run; agent step waiting" in counted
    # No child's end was presented: the only result is the parent's.
    assert [m["details"]["runId"] for m in workflow_messages(pi.entries(), "terminal")] == [parent]
    assert server.diagnose() == []


# --- widgetLines and statusText on crafted views ---------------------------------------------

PRESENTATION_TS = PI_DIR / "extension" / "presentation.ts"

SCRIPT = """
import { statusText, widgetLines } from %s;
const views = JSON.parse(await new Promise((done) => {
  let text = "";
  process.stdin.on("data", (chunk) => (text += chunk));
  process.stdin.on("end", () => done(text));
}));
console.log(JSON.stringify(views.map((view) => ({
  widget: widgetLines(view) ?? null,
  status: statusText(view) ?? null,
}))));
"""


def run(run_id: str, status: str = "waiting", **fields: Any) -> dict[str, Any]:
    """One run summary as the session view lists it."""
    base = {"runId": run_id, "workflow": fields.pop("workflow", "fan"), "status": status}
    return {**base, "parkReason": None, "currentNode": None, "parentRunId": None, **fields}


def progress(total: int, ended: int, failed: int = 0) -> dict[str, Any]:
    """A parent's `children`: its progress through the fan_out it waits on."""
    return {
        "waitId": "wait_1",
        "nodeId": "each",
        "kind": "fan_out",
        "workflow": "leaf",
        "total": total,
        "started": total,
        "ended": ended,
        "failed": failed,
        "status": "running",
        "detached": False,
    }


def active(run_id: str, kind: str = "agent", **fields: Any) -> dict[str, Any]:
    """The session's active request, of run `run_id`."""
    return {
        "requestId": fields.pop("requestId", "req_1"),
        "runId": run_id,
        "nodeId": "look",
        "kind": kind,
        "status": "pending",
        "title": None,
        "allowedTools": None,
        "deadlineAt": None,
        "workflowMessageId": "wm_1",
        "messageStatus": "pending",
        "lastRejection": None,
        **fields,
    }


def view(runs: list[dict[str, Any]], request: dict[str, Any] | None = None) -> dict[str, Any]:
    """A session view with these runs and active request."""
    return {
        "sessionId": SESSION,
        "coordinatorEpoch": 1,
        "revision": 1,
        "activeRequest": request,
        "messages": [],
        "moreMessages": 0,
        "runs": runs,
    }


def presented(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`widgetLines` and `statusText` of each view, evaluated in `presentation.ts` under the
    pinned Node (it strips the types)."""
    require_pi()
    result = subprocess.run(
        [
            str(node_bin() / "node"),
            "--input-type=module",
            "-e",
            SCRIPT % json.dumps(str(PRESENTATION_TS)),
        ],
        input=json.dumps(views),
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "")},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout))


def test_widget_lines_show_root_runs_with_their_childrens_progress_and_steps() -> None:
    """Only root runs are lines (children, grandchildren too, belong to the line of their
    listed ancestor); a parent shows `ended/total done` and `, N failed` after its status; a
    child's active step or decision is on its parent's line, naming the child (and deciding
    the child's run); a child whose parent is not listed is a line of its own; the status line
    counts the lines, and the widget's limit of five counts lines, not children."""
    parent = run("run_p", currentNode="each", children=progress(10, 3))
    kids = [
        run(f"run_c{i}", workflow="leaf", currentNode="look", parentRunId="run_p") for i in range(3)
    ]
    failed = run("run_p", currentNode="each", children=progress(10, 4, failed=1))
    grandchild = run("run_g", workflow="leaf", parentRunId="run_c1")
    orphan = run("run_o", workflow="leaf", currentNode="look", parentRunId="run_gone")
    roots = [run(f"run_r{i}", workflow="other", status="running") for i in range(5)]
    finished_parent = run("run_f", status="completed")
    late_child = run("run_l", workflow="leaf", parentRunId="run_f")

    cases = presented(
        [
            view([parent, *kids]),
            view([failed, *kids], active("run_c2")),
            view([parent, *kids], active("run_c1", "decision", title="Ship?")),
            view(
                [parent, *kids, grandchild], active("run_g", requestId="req_9", status="validating")
            ),
            view([parent, *kids, orphan], active("run_p")),
            view([*roots, parent, *kids]),
            view([finished_parent, late_child]),
            view(
                [run("run_p", status="completed"), run("run_c0", "completed", parentRunId="run_p")]
            ),
        ]
    )

    assert cases[0] == {
        "widget": ["Workflows in this session:", "  run_p fan waiting at each 3/10 done"],
        "status": "workflows: 1 active run",
    }
    assert cases[1] == {
        "widget": [
            "Workflows in this session:",
            "  run_p fan waiting at each 4/10 done, 1 failed — agent req_1 of child run run_c2",
        ],
        "status": "workflows: 1 active run; agent step waiting",
    }
    assert cases[2]["widget"] == [
        "Workflows in this session:",
        '  run_p fan waiting at each 3/10 done — decision "Ship?" of child run run_c1:'
        " /workflow decide run_c1",
    ]
    assert (
        cases[2]["status"] == "workflows: 1 active run; decision waiting: /workflow decide run_c1"
    )
    assert cases[3]["widget"] == [
        "Workflows in this session:",
        "  run_p fan waiting at each 3/10 done — agent req_9 of child run run_g (validating)",
    ]
    assert cases[4] == {
        "widget": [
            "Workflows in this session:",
            "  run_p fan waiting at each 3/10 done — agent req_1",
            "  run_o leaf waiting at look",
        ],
        "status": "workflows: 2 active runs; agent step waiting",
    }
    assert cases[5]["widget"] == [
        "Workflows in this session:",
        *[f"  run_r{i} other running" for i in range(5)],
        "  … and 1 more (/workflow status)",
    ]
    assert cases[5]["status"] == "workflows: 6 active runs"
    assert cases[6] == {
        "widget": ["Workflows in this session:", "  run_l leaf waiting"],
        "status": "workflows: 1 active run",
    }
    assert cases[7] == {"widget": None, "status": None}
