"""The built-in workflows end to end with the real Pi, a real server and the scripted model.

Each test works on a real git repository in the server's project directory (Pi's working
directory), and the scripted model answers from what it is sent: the task in the person's
prompt, the request id and the failure output in a step's text, the diff a reviewer is
shown, the command and interval the person names. ``implement`` runs on a tiny project
whose ``make test`` fails until the model's second edit (read from the failure output of the
first test run) fixes it, approved by the person with ``/workflow decide`` (and the same
run detached: the headless Pi edits, the person approves at the CLI); ``review``
reviews a three-file change with three detached sub-agents on headless Pis whose steps are
in flight at the same time, merged into one message in the person's session; ``watch``
watches a command whose output changes once while the server is down during a sleep.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pi.support.mock_provider import (
    MODEL_ID,
    PROVIDER,
    ChatRequest,
    MockProvider,
    Reply,
    last_is_tool_result,
    message_text,
    request_id_in,
    text,
    user_text_contains,
    user_text_matches,
)
from pi.support.pi_rpc import MakePi, PiProcess, Record, node_bin, pi_binary, workflows_cli
from pi.support.records import (
    content_text,
    decision_cards,
    result_text,
    tool_results,
    workflow_messages,
)
from pi.test_children import agent_rows, children_of, wait_agent_gone

from support.projects import (
    FIRST_FIX,
    REVIEWED,
    calc_project,
    fix_from_failure,
    git,
    review_project,
    todo_line,
)
from support.server import ServerProcess, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SESSION = "builtins-origin"
STEP_MARK = "--- Workflow step ---"
TERMINAL_MARK = "--- Workflow run finished ---"
CHILD_MARK = "[child run of "
EDIT_TOOLS = ["--tools", "read,edit,write,grep,find,ls,workflow"]
"""The person's Pi in the implement test: Pi's file tools and our `workflow`."""
RUN_ID = re.compile(r"\brun_[0-9a-z]+")
HOLD_SECONDS = 120.0
"""How long a held reviewer's reply waits for the others (three cold Pi starts under load)."""
DONE = {"completed", "failed", "timed_out", "cancelled", "paused", "ambiguous"}


@pytest.fixture
def server(root: Path, provider: MockProvider) -> Iterator[ServerProcess]:
    """A started server whose headless agents are the real Pi, configured (the server's
    ``~/.pi/agent``) to use the scripted model."""
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
    process.env.pop("PI_CODING_AGENT_DIR", None)  # the agents use the user's ~/.pi/agent
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
    try:
        yield process.start()
    finally:
        process.cleanup()


# --- reading what the model is sent ----------------------------------------------------------


def step_text(request: ChatRequest) -> str:
    """The latest workflow step the model was sent in this conversation."""
    steps = [t for t in request.user_texts() if STEP_MARK in t]
    assert steps, "no workflow step in the conversation"
    return steps[-1]


def last_tool(request: ChatRequest) -> dict[str, Any]:
    """The name and arguments of the tool call the model is getting the result of."""
    for message in reversed(request.messages[:-1]):
        if message.get("role") == "assistant" and message.get("tool_calls"):
            function = message["tool_calls"][-1]["function"]
            return {"name": function["name"], "args": json.loads(function["arguments"] or "{}")}
    return {"name": None, "args": {}}


def after_tool(name: str, step: str) -> Any:
    """True when the model answers a result of tool `name` during the step whose text
    contains `step`."""

    def check(request: ChatRequest) -> bool:
        return (
            last_is_tool_result(request)
            and last_tool(request)["name"] == name
            and step in step_text(request)
        )

    return check


def submit(request: ChatRequest, output: Any) -> Reply:
    """Submit `output` for the latest step the model was sent."""
    arguments = {
        "action": "submit",
        "requestId": request_id_in(step_text(request)),
        "output": output,
    }
    return Reply(tool_name="workflow", tool_arguments=arguments)


def line_after(prefix: str, value: str) -> str:
    """The rest of the first line of `value` that starts with `prefix`."""
    match = re.search(rf"^{re.escape(prefix)}(.*)$", value, re.MULTILINE)
    assert match, f"no line starting {prefix!r} in {value!r}"
    return match.group(1).strip()


def started_run(records: list[Record]) -> str:
    """The run id in the `workflow` tool's `start` result."""
    [started] = [r for r in tool_results(records) if "Started run" in result_text(r)]
    match = RUN_ID.search(result_text(started))
    assert match, result_text(started)
    return match.group(0)


def entries_until(pi: PiProcess, predicate: Any, what: str, timeout: float = 90) -> list[Record]:
    """Pi's session entries once `predicate(entries)` holds (polled with a deadline)."""

    def check() -> list[Record] | None:
        entries = pi.entries()
        return entries if predicate(entries) else None

    return list(wait_for(check, timeout, what))


def finish_rules(provider: MockProvider) -> None:
    """The replies every test needs last: to a finished run, and after a `workflow` result."""
    provider.on(user_text_contains(TERMINAL_MARK), text("The run finished."), name="terminal")
    provider.on(last_is_tool_result, text("OK."), name="after a tool result")


# --- discoverable in Pi ----------------------------------------------------------------------


def test_workflow_list_in_pi_names_each_builtin_in_one_line_with_what_it_does(
    server: ServerProcess, make_pi: MakePi
) -> None:
    """`/workflow list` shows every built-in on one line: name, origin, what it does (the
    first line of its docstring) and its path."""
    pi = make_pi(session_id=SESSION)

    note = pi.slash("/workflow list")

    lines = note["message"].splitlines()
    for name, summary in (
        ("implement", "from a task to a tested change: a plan you approve, edits, tests, fixes."),
        ("review", "review the current change, one sub-agent per changed file, in parallel."),
        ("watch", "run a command every interval and tell the session when its result changes."),
    ):
        [line] = [line for line in lines if line.startswith(f"{name} (builtin)")]
        assert line.startswith(f"{name} (builtin): {summary} — /"), line
        assert line.endswith(f"/builtins/{name}.workflow.py"), line


# --- builtin:implement -----------------------------------------------------------------------

TASK = "Make add(2, 3) return 5"
PLAN_MARK = "Plan a change to the project in"


def implement_rules(provider: MockProvider) -> None:
    """The model of an implement run. Planning, it reads the Makefile the test command names,
    then the script the Makefile runs, and plans to change the module that script imports.
    Implementing, it edits the planned file (fixing ``add`` only); fixing, it makes the edit
    the failure output it was sent names; each edit is submitted naming the file it edited.
    The summary repeats the test result it was sent."""

    def read(path: str) -> Reply:
        return Reply(tool_name="read", tool_arguments={"path": path})

    def plan_start(request: ChatRequest) -> Reply:
        assert "`make test`" in request.last_user_text()
        return read("Makefile")

    def after_makefile(request: ChatRequest) -> Reply:
        script = re.search(r"python3 (\S+\.py)", message_text(request.last))
        assert script, message_text(request.last)
        return read(script.group(1))

    def plan(request: ChatRequest) -> Reply:
        module = re.search(r"^from (\w+) import", message_text(request.last), re.MULTILINE)
        assert module, message_text(request.last)
        file = f"{module.group(1)}.py"
        output = {
            "summary": line_after("Task:", step_text(request)),
            "steps": [f"Change add in {file} to add its arguments"],
            "files": [file],
            "risks": [],
        }
        return submit(request, output)

    def edit(old: str, new: str, path: str) -> Reply:
        arguments = {"path": path, "edits": [{"oldText": old, "newText": new}]}
        return Reply(tool_name="edit", tool_arguments=arguments)

    def implement(request: ChatRequest) -> Reply:
        return edit(*FIRST_FIX, line_after("Files:", request.last_user_text()))

    def fix(request: ChatRequest) -> Reply:
        return edit(*fix_from_failure(request.last_user_text()), "calc.py")

    def submit_edit(request: ChatRequest) -> Reply:
        edited = last_tool(request)["args"]["path"]
        return submit(request, {"summary": f"edited {edited}", "changedFiles": [edited]})

    def summarize(request: ChatRequest) -> Reply:
        return Reply(text="Done. " + line_after("The tests passed", request.last_user_text()))

    def read_of(name: str) -> Any:
        def check(request: ChatRequest) -> bool:
            return (
                after_tool("read", PLAN_MARK)(request)
                and last_tool(request)["args"].get("path") == name
            )

        return check

    provider.on(user_text_contains(PLAN_MARK), plan_start, name="plan: read the Makefile")
    provider.on(read_of("Makefile"), after_makefile, name="plan: read the test script")
    provider.on(after_tool("read", PLAN_MARK), plan, name="plan: submit")
    provider.on(user_text_contains("Implement the approved plan"), implement, name="implement")
    provider.on(user_text_contains("Fix round 1 of 3"), fix, name="fix")
    provider.on(after_tool("edit", STEP_MARK), submit_edit, name="submit an edit")
    provider.on(user_text_contains("The implement workflow is done"), summarize, name="summary")


def implemented(project: Path) -> dict[str, Any]:
    """The output of an implement run of `TASK` on the calc project: one fix round."""
    return {
        "dir": str(project),
        "task": TASK,
        "plan": {
            "summary": TASK,
            "steps": ["Change add in calc.py to add its arguments"],
            "files": ["calc.py"],
            "risks": [],
        },
        "changedFiles": ["calc.py"],
        "testCommand": ["make", "test"],
        "tests": "passed",
        "fixRounds": 1,
        "summary": "Done. (`make test`) after 1 fix round(s).",
    }


def check_implemented(project: Path, provider: MockProvider) -> None:
    """The fix step was sent the real failure of `make test`; the project's tests pass now
    and the change is left uncommitted."""
    [fixing] = [r for r in provider.requests() if user_text_contains("Fix round 1 of 3")(r)]
    assert "FAIL: describe(2, 3) starts with 'difference'" in fixing.last_user_text()
    for request in provider.requests():
        assert "Workflow decision" not in json.dumps(request.messages)
    done = subprocess.run(
        ["make", "-s", "test"], cwd=project, capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout) == (0, "ok: 2 checks passed\n"), done.stderr
    assert git(project, "status", "--porcelain").split() == ["M", "calc.py"]


def test_implement_plans_is_approved_by_the_person_and_fixes_the_failing_test_once(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The person asks the model to implement a task; the model starts `builtin:implement`
    with the task it read. It plans (reading with `read`, within the plan step's read-only
    tools); the plan waits for the person's decision (a card, never sent to the model), who
    approves it with `/workflow decide`. The model's edit fixes `add` only, so the real
    `make test` fails; the fix step is sent that failure and the model's edit, read from it,
    fixes `describe`; the tests pass and the model's summary ends the run. Each step came with
    its own tool limit and no edit was blocked."""
    project = calc_project(server.project)

    def start(request: ChatRequest) -> Reply:
        asked = request.last_user_text().split(": ", 1)[1]
        arguments = {"action": "start", "workflow": "builtin:implement", "input": {"task": asked}}
        return Reply(tool_name="workflow", tool_arguments=arguments)

    provider.on(user_text_matches(r"^Implement with builtin:implement: "), start, name="start")
    implement_rules(provider)
    finish_rules(provider)
    pi = make_pi(session_id=SESSION, extra_args=EDIT_TOOLS)

    run_id = started_run(pi.run_prompt(f"Implement with builtin:implement: {TASK}"))
    [card] = decision_cards(entries_until(pi, decision_cards, "the plan's decision card"))
    assert card["data"]["title"] == f"Implement this plan? {TASK}"
    assert "Files: calc.py" in card["data"]["text"]
    assert server.run(run_id)["status"] == "waiting"
    note = pi.slash(f"/workflow decide {run_id} approve")
    assert f"Decided approve for run {run_id}" in note["message"]
    done = server.wait_status(run_id, DONE, 180)

    assert (done["status"], done["output"]) == ("completed", implemented(project)), done
    check_implemented(project, provider)
    tools = [r for r in pi.records if r.get("type") == "tool_execution_end"]
    assert [(r["toolName"], r["isError"]) for r in tools if r["toolName"] != "workflow"] == [
        ("read", False),
        ("read", False),
        ("edit", False),
        ("edit", False),
    ]
    steps = workflow_messages(pi.entries(), "step")
    assert [s["details"].get("allowedTools") for s in steps] == [
        ["read", "grep", "find", "ls"],
        ["read", "grep", "find", "ls", "edit", "write"],
        ["read", "grep", "find", "ls", "edit", "write"],
        [],
    ]
    assert server.diagnose() == []


def test_implement_runs_detached_with_the_decision_taken_at_the_cli(
    server: ServerProcess, provider: MockProvider
) -> None:
    """Started with `pi-workflows run start builtin:implement --detached`, the steps are done
    by the headless Pi the server runs in the project (its edits land there), the person
    approves the plan with `pi-workflows decision answer`, and the run completes with the
    same result; the headless Pi is gone afterwards."""
    project = calc_project(server.project)
    implement_rules(provider)
    finish_rules(provider)

    started = cli(
        server, "run", "start", "builtin:implement", "--project", str(project), "--detached",
        "--input", json.dumps({"task": TASK}), "--json",
    )  # fmt: skip
    run_id = str(json.loads(started)["runId"])
    wait_for(
        lambda: (server.run(run_id).get("waitingOn") or {}).get("kind") == "decision",
        120,
        "the plan's decision",
    )
    cli(server, "decision", "answer", run_id, "--choice", "approve")
    done = server.wait_status(run_id, DONE, 180)

    assert (done["status"], done["output"]) == ("completed", implemented(project)), done
    check_implemented(project, provider)
    [(mode, session)] = server.query(
        "SELECT execution_mode, origin_session FROM runs WHERE run_id = ?", run_id
    )
    assert (mode, session) == ("detached", f"detached-{run_id}")
    wait_agent_gone(server, run_id)
    assert server.diagnose() == []


def test_implement_in_a_default_pi_plans_with_ls_and_asks_the_change_in_a_dialog(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """In a Pi with its default tools (`read`, `bash`, `edit`, `write`) the plan step gets
    `grep`, `find` and `ls` turned on, and the model's `ls` runs. The person chooses
    *change*: the `change` question opens a text dialog (never a model turn), what they type
    goes to the second plan step, and after *stop* the session has its own tools again."""
    project = calc_project(server.project)
    plan = {"summary": TASK, "steps": ["Change add"], "files": ["calc.py"], "risks": []}
    provider.on(
        user_text_contains(PLAN_MARK), lambda r: Reply(tool_name="ls", tool_arguments={"path": "."})
    )
    provider.on(after_tool("ls", PLAN_MARK), lambda r: submit(r, plan), name="submit the plan")
    provider.on(user_text_contains("what tools now"), text("These."), name="the person")
    finish_rules(provider)
    pi = make_pi(session_id=SESSION, builtin_tools=True)
    pi.answer_dialog = lambda r: {"value": "also print the sum"} if r["method"] == "input" else None
    run_id = server.start_run(
        "builtin:implement", {"task": TASK, "dir": str(project)}, origin_session=SESSION
    )

    entries_until(pi, decision_cards, "the plan's decision card")
    pi.slash(f"/workflow decide {run_id} change")
    entries_until(pi, lambda es: len(decision_cards(es)) == 2, "the second plan's decision")
    pi.slash(f"/workflow decide {run_id} stop")
    done = server.wait_status(run_id, DONE, 120)
    wait_for(lambda: requests_with(provider, TERMINAL_MARK), 60, "the run's result turn")
    wait_for(lambda: not pi.command({"type": "get_state"})["data"]["isStreaming"], 30, "idle")
    pi.run_prompt("what tools now?")

    assert done["status"] == "completed", done
    [dialog] = pi.ui_requests("input")
    assert "What should change in the plan?" in dialog["title"]
    plans = requests_with(provider, PLAN_MARK)
    assert len(plans) == 2
    assert all({"ls", "grep", "find", "read"} <= set(r.tool_names) for r in plans)
    assert "The person asked for this change to it: also print the sum" in plans[1].last_user_text()
    ls_runs = [
        r for r in pi.records if r.get("type") == "tool_execution_end" and r["toolName"] == "ls"
    ]
    assert [r["isError"] for r in ls_runs] == [False, False]
    for request in provider.requests():
        assert "What should change" not in json.dumps(request.messages)
    [after] = requests_with(provider, "what tools now")
    assert sorted(after.tool_names) == ["bash", "edit", "read", "workflow", "write"]
    assert server.diagnose() == []


def requests_with(provider: MockProvider, fragment: str) -> list[ChatRequest]:
    """The model requests whose last message is a user message containing `fragment`."""
    return [r for r in provider.requests() if user_text_contains(fragment)(r)]


def cli(server: ServerProcess, *args: str) -> str:
    """Run the real `pi-workflows` command against the server; its stdout (it must succeed)."""
    done = subprocess.run(
        [str(workflows_cli()), "--home", str(server.home), *args],
        env={**server.env}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


# --- builtin:review --------------------------------------------------------------------------


class Gate:
    """Holds each reviewer's reply until `count` different steps have asked the model, so a
    reply leaves only while all of them are in flight; records when each asked and left."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.cond = threading.Condition()
        self.asked: dict[str, float] = {}
        self.answered: dict[str, float] = {}
        self.all_in_flight: list[bool] = []

    def reply(self, request: ChatRequest) -> Reply:
        step = step_text(request)
        request_id = request_id_in(step)
        with self.cond:
            self.asked.setdefault(request_id, time.monotonic())
            self.cond.notify_all()
            met = self.cond.wait_for(lambda: len(self.asked) >= self.count, HOLD_SECONDS)
            self.all_in_flight.append(met)
            self.answered.setdefault(request_id, time.monotonic())
        file, line = todo_line(step[step.index("diff --git") :])
        finding = {"file": file, "line": line, "severity": "warning", "text": f"a TODO in {file}"}
        return submit(request, {"findings": [finding]})


def test_review_runs_three_detached_reviewers_at_once_and_merges_their_findings(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """`/workflow start builtin:review` in the person's Pi reviews a change of three files
    (and a deletion): three detached children, each on a headless Pi of its own, are asked
    at the same time (the model holds each reply until all three asked); each reports the
    TODO line it finds in the diff it was sent. The merged findings arrive in the person's
    session as one message, then the model's reply about them; no reviewer's step is shown
    there, and every headless Pi is gone afterwards."""
    project = review_project(server.project)
    gate = Gate(3)

    def present(request: ChatRequest) -> Reply:
        found = re.findall(r"^- \[warning\] (\S+): ", request.last_user_text(), re.MULTILINE)
        return Reply(text=f"{len(found)} warnings to look at: {', '.join(found)}.")

    provider.on(user_text_contains("Review the change to the file"), gate.reply, name="reviewer")
    provider.on(user_text_contains("The review workflow finished"), present, name="present")
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    note = pi.slash('/workflow start builtin:review {"base": "HEAD"}')
    match = RUN_ID.search(note["message"])
    assert match, note
    run_id = match.group(0)
    done = server.wait_status(run_id, DONE, 240)

    assert done["status"] == "completed", done
    findings = [
        {"file": "alpha.py", "line": 2, "severity": "warning", "text": "a TODO in alpha.py"},
        {"file": "beta.py", "line": 3, "severity": "warning", "text": "a TODO in beta.py"},
        {"file": "gamma.py", "line": 3, "severity": "warning", "text": "a TODO in gamma.py"},
    ]
    presentation = "3 warnings to look at: alpha.py:2, beta.py:3, gamma.py:3."
    assert done["output"] == {
        "base": "HEAD",
        "dir": str(project),
        "reviewed": sorted(REVIEWED),
        "findings": findings,
        "counts": {"error": 0, "warning": 3, "note": 0},
        "failed": [],
        "skipped": [],
        "deleted": ["old.py"],
        "presentation": presentation,
    }
    # Three reviewers were in flight at once: no reply left before the last one asked.
    assert len(gate.asked) == 3, gate.asked
    assert gate.all_in_flight == [True, True, True]
    assert max(gate.asked.values()) < min(gate.answered.values())
    children = children_of(server, run_id)
    assert [(status, mode) for _, status, mode, _ in children] == [("completed", "detached")] * 3
    for child_id, *_ in children:
        wait_agent_gone(server, child_id)
    assert agent_rows(server, run_id) == []
    # The person's session: one message with the merged review, the model's reply, the end.
    entries = entries_until(
        pi, lambda es: workflow_messages(es, "terminal"), "the run's result in the session"
    )
    shown = workflow_messages(entries)
    assert [m["details"]["kind"] for m in shown] == ["notification", "step", "terminal"]
    assert {m["details"]["runId"] for m in shown} == {run_id}
    message = content_text(shown[0])
    assert message.startswith("Review of 3 changed file(s) against HEAD: 0 error(s), 3 warning(s)")
    assert "- [warning] beta.py:3: a TODO in beta.py" in message
    assert not [e for e in entries if CHILD_MARK in json.dumps(e)]
    assert server.diagnose() == []


# --- builtin:watch ---------------------------------------------------------------------------


def test_watch_tells_the_session_of_a_change_that_happened_while_the_server_was_down(
    server: ServerProcess, make_pi: MakePi, provider: MockProvider
) -> None:
    """The person asks the model to watch a command; the model starts `builtin:watch` with the
    command, interval and stop word it read. The first result is told in the session; the
    server is killed during the sleep after it (the sleep stays pending in the state), the
    command's output changes while it is down, and the sleep comes due then. The restarted
    server runs the next check late, once: the change and the final word are told in the same
    session, once each, and the run ends because the condition holds."""
    status = server.project / "status.txt"
    status.write_text("building\n")

    def start(request: ChatRequest) -> Reply:
        match = re.search(
            r"Watch `(.+)` every (\d+) seconds until it says (\w+)", request.last_user_text()
        )
        assert match, request.last_user_text()
        watch = {
            "command": match.group(1),
            "everySeconds": int(match.group(2)),
            "until": {"outputContains": match.group(3)},
        }
        arguments = {"action": "start", "workflow": "builtin:watch", "input": watch}
        return Reply(tool_name="workflow", tool_arguments=arguments)

    provider.on(user_text_matches(r"^Watch `"), start, name="start")
    finish_rules(provider)
    pi = make_pi(session_id=SESSION)

    run_id = started_run(
        pi.run_prompt("Watch `cat status.txt` every 5 seconds until it says passed")
    )
    entries_until(pi, lambda es: workflow_messages(es, "notification"), "the first result")

    def pending_sleep() -> tuple[str, int] | None:
        rows = server.query(
            "SELECT attempt_id, due_at FROM run_waits"
            " WHERE run_id = ? AND kind = 'sleep' AND status = 'pending'",
            run_id,
        )
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    wait_for(pending_sleep, 60, "the watch to sleep")
    server.kill()
    asleep = pending_sleep()
    assert asleep is not None, "the server died during the sleep, which stays pending"
    attempt, due_ms = asleep
    status.write_text("passed\n")
    wait_for(lambda: time.time() * 1000 > due_ms + 200, 30, "the sleep to come due")
    server.start()
    done = server.wait_status(run_id, DONE, 90)

    assert done["status"] == "completed", done
    assert done["output"] == {
        "command": ["cat", "status.txt"],
        "checks": 2,
        "changes": 1,
        "stoppedBecause": "condition",
        "exitCode": 0,
        "output": "passed",
    }
    [(woke,)] = server.query("SELECT output_json FROM node_attempts WHERE attempt_id = ?", attempt)
    slept = json.loads(woke)
    assert slept["lateMs"] > 0  # it came due while the server was down
    assert datetime.fromisoformat(slept["until"].replace("Z", "+00:00")) == datetime.fromtimestamp(
        due_ms / 1000, UTC
    )
    checks = server.query(
        "SELECT COUNT(*) FROM node_attempts WHERE run_id = ? AND node_id = 'check'"
        " AND status = 'completed'",
        run_id,
    )
    assert checks == [(2,)]
    entries = entries_until(
        pi, lambda es: workflow_messages(es, "terminal"), "the run's result after the restart"
    )
    notes = [content_text(m) for m in workflow_messages(entries, "notification")]
    assert notes == [
        "Watching `cat status.txt` every 5 s: exit code 0, output:\nbuilding",
        "`cat status.txt` changed (check 2):\noutput now:\npassed",
        "Stopped watching `cat status.txt` after 2 check(s): the stop condition holds. Last"
        " result: exit code 0, output:\npassed",
    ]
    assert server.diagnose() == []
