"""Every client operation, applied while a runner works on a run, through real processes.

The revision rule (docs/state.md) says only a write that changes what a runner reads may
make its next proposal conflict. This test enumerates the server's operation registry and
applies each operation while a runner is inside work of each kind (a manual action, an
idempotent action, a manual shell command, a compute node, the validation of a submission),
then lets the work finish. An operation that is not meant to stop the runner must leave it
alone: the run completes under that same runner (every runner of the run `exited`), the
work ran once (a witness file outside the database), nothing was refused and kept
(`effect.kept`) or left ambiguous, and `state diagnose` is clean. The operations meant to
stop it (pause, cancel, server stop) must stop it cleanly: a pause or stop parks the run at
the node's end (its effect settled, not ambiguous) and it then completes once; a cancel ends
it. An operation added to the registry without a row here fails the test.
"""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import pi_workflows.server.app  # noqa: F401 - registers every operation
from pi_workflows.client import Client, ClientError
from pi_workflows.server.handlers.registry import registered

from support.server import ServerProcess, wait_for

SESSION = "session-ops"
SUBMITTER = "ops-submitter"  # one client id, so a retried submission adopts its receipt
KINDS = ("manual", "idempotent", "shell", "compute", "validation")

WORK = """
import time
from pathlib import Path
from pi_workflows import (Workflow, action, agent, compute, edge, idempotent_effect,
                          manual_effect, notify, shell, switch, Rejected)

KINDS = ("manual", "idempotent", "shell", "compute", "validation")


def _gate(ctx):
    gate = Path(ctx.input["gate"])
    (gate / "started").write_text("1")
    while not (gate / "go").exists():
        time.sleep(0.01)
    return gate


def _apply(gate, what):
    with open(gate / "applied", "a") as out:
        out.write(what + "\\n")


def body(ctx):
    _apply(_gate(ctx), ctx.effect_key)
    return {"applied": True}


def command(ctx):
    gate = ctx.input["gate"]
    return ["sh", "-c", f"touch {gate}/started; while [ ! -e {gate}/go ]; do sleep 0.01; done;"
            f" echo {ctx.effect_key} >> {gate}/applied"]


def work(ctx):
    _apply(_gate(ctx), "compute")
    return {"computed": True}


def check(output, ctx):
    _apply(_gate(ctx), "validate")
    if output.get("title") != "ok":
        raise Rejected("the title must be ok")


workflow = Workflow(
    "work",
    start="hello",
    nodes={
        "hello": notify(lambda ctx: "Starting " + ctx.input["kind"]),
        "route": compute(lambda ctx: {"kind": ctx.input["kind"]}),
        "manual": action(body, effect=manual_effect("charge")),
        "idempotent": action(body, effect=idempotent_effect("charge")),
        "shell": shell(command, effect=manual_effect("charge")),
        "compute": compute(work),
        "validation": agent(prompt="A title", expected_output='{"title": "ok"}', validate=check),
        "done": compute(lambda ctx: {"ok": True, "level": ctx.settings["level"]}),
    },
    edges=[
        edge("hello", "route"),
        switch("route", on="$.kind", cases={kind: kind for kind in KINDS}),
        *[edge(kind, "done") for kind in KINDS],
    ],
    # Live settings: a change while the runner works must not make it conflict either.
    settings={"type": "object", "properties": {"level": {"type": "integer", "default": 1}}},
)
"""

QUICK = """
from pi_workflows import Workflow, compute

workflow = Workflow("quick", start="one", nodes={"one": compute(lambda ctx: {"one": 1})})
"""


@dataclass
class Case:
    """One run of ``work`` with its work gated, and what an operation may use of it."""

    server: ServerProcess
    kind: str
    gate: Path
    run_id: str = ""
    epoch: int = 0
    notification: str = ""
    request_id: str | None = None
    effect_id: str | None = None
    submitted: dict[str, Any] = field(default_factory=dict)
    threads: list[threading.Thread] = field(default_factory=list)

    def client(self, **kwargs: Any) -> Client:
        return self.server.client(**kwargs)

    def release(self) -> None:
        (self.gate / "go").write_text("1")

    def applied(self) -> list[str]:
        path = self.gate / "applied"
        return path.read_text().split() if path.exists() else []

    def background(self, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(90)
            assert not thread.is_alive(), "a held command never answered"


Apply = Callable[[Case], None]


def _call(case: Case, operation: str, payload: dict[str, Any] | None = None, *,
          run: bool = False, refused: bool = False) -> Any:  # fmt: skip
    """Send ``operation``; a refusal is a fine answer only where ``refused`` allows it."""
    with case.client() as client:
        try:
            return client.call(operation, payload or {}, run_id=case.run_id if run else None)
        except ClientError:
            if not refused:
                raise
            return None


def _read(operation: str, payload: Callable[[Case], dict[str, Any]] | None = None,
          *, run: bool = False) -> Apply:  # fmt: skip
    return lambda case: _call(case, operation, payload(case) if payload else {}, run=run)


def _refused(operation: str, payload: Callable[[Case], dict[str, Any]] | None = None,
             *, run: bool = True) -> Apply:  # fmt: skip
    return lambda case: _call(
        case, operation, payload(case) if payload else {}, run=run, refused=True
    )


def _watch_run(case: Case) -> None:
    with case.client() as client, client.watch_run(case.run_id) as watch:
        assert watch.next_view(10) is not None


def _watch_runs(case: Case) -> None:
    with case.client() as client, client.watch_runs() as watch:
        assert watch.next_view(10) is not None


def _watch_session(case: Case) -> None:
    with case.client() as client, client.watch_session(SESSION, case.epoch) as watch:
        assert watch.next_view(10) is not None


def _attach(case: Case) -> None:
    with case.client() as client:
        case.epoch = client.attach_session(SESSION)


def _report_messages(case: Case) -> None:
    """The notification is reported present, then the whole (idle) branch, which would
    present a missing step again."""
    with case.client() as client:
        sent = client.report_messages(SESSION, case.epoch, {case.notification: "entry-1"})
        again = client.report_messages(
            SESSION, case.epoch, {case.notification: "entry-1"}, idle=True
        )
    assert sent["sent"] == [case.notification]
    assert again["resumed"] == []


def _report_turn(case: Case) -> None:
    """A turn aborted, then a turn for the step (during validation) that ends without a
    submission: neither pauses nor reminds a run whose runner works."""
    with case.client() as client:
        client.report_turn(SESSION, case.epoch, "started", workflow_message_id=case.notification)
        ended = client.report_turn(SESSION, case.epoch, "ended", stop_reason="aborted")
        step = [m for m in client.get_run(case.run_id)["messages"] if m["kind"] == "step"]
        if step:
            message = step[-1]["workflowMessageId"]
            client.report_turn(SESSION, case.epoch, "started", workflow_message_id=message)
            completed = client.report_turn(SESSION, case.epoch, "ended", stop_reason="completed")
            assert (completed["paused"], completed["reminder"]) == (None, None)
    assert ended["paused"] is None


def _update(case: Case) -> None:
    if case.request_id is None:
        _call(case, "interaction.update", {"requestId": "req_none", "body": {}}, refused=True)
        return
    _call(case, "interaction.update", {"requestId": case.request_id, "body": {"pct": 50}})


def _submit_again(case: Case) -> None:
    target = case.request_id or "req_none"
    _call(case, "interaction.submit", {"requestId": target, "output": {"title": "x"}},
          refused=True)  # fmt: skip


def _resolve(case: Case) -> None:
    effect = case.effect_id or "eff_none"
    _call(case, "effect.resolve", {"effectId": effect, "resolution": "applied"}, refused=True)


def _effect_get(case: Case) -> None:
    """`effect.get` of the run's effect (a read), or of none (refused as not found)."""
    effect = case.effect_id
    _call(case, "effect.get", {"effectId": effect or "eff_none"}, refused=effect is None)


def _start_other(case: Case) -> None:
    with case.client() as client:
        other = client.start_run("quick", {}, project_dir=case.server.project)
    case.server.wait_status(str(other["runId"]), "completed")


def _blob(case: Case) -> None:
    with case.client() as client:
        shown = client.show_workflow("work", project=case.server.project)
        client.call("blob.read", {"digest": shown["definitionDigest"], "length": 64})


def _upload(case: Case) -> None:
    """A whole upload (held in memory for its connection), then forgotten with it."""
    data = b'{"uploaded": true}'
    payload = {
        "digest": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "offset": 0,
        "data": base64.b64encode(data).decode(),
    }
    assert _call(case, "upload.put", payload)["complete"] is True


def _message_get(case: Case) -> None:
    _call(case, "workflowMessage.get", {"workflowMessageId": case.notification})


def _schedule(operation: str) -> Apply:
    """A schedule of ``quick`` (hourly, so it never fires here) is added, the operation is
    applied to it, and it is deleted: schedules are not run state, and a fire would make a
    new run, never touch this one."""

    def apply(case: Case) -> None:
        name = f"ops-{case.kind}-{operation.rsplit('.', 1)[1]}"
        project = case.server.project
        with case.client() as client:
            client.add_schedule(name, "quick", every="1h", project=project)
            if operation == "schedule.list":
                assert name in [s["name"] for s in client.list_schedules()]
            elif operation == "schedule.get":
                assert client.get_schedule(name)["schedule"]["name"] == name
            elif operation == "schedule.pause":
                client.pause_schedule(name)
            elif operation == "schedule.resume":
                client.pause_schedule(name)
                client.resume_schedule(name)
            elif operation == "schedule.trigger":
                assert client.trigger_schedule(name)["fire"]["runId"] != case.run_id
            elif operation == "schedule.backfill":
                hour = 3_600_000
                start = (int(time.time() * 1000) // hour - 3) * hour
                client.backfill_schedule(name, start, start + hour)
            client.delete_schedule(name)

    return apply


SCHEDULES: dict[str, Apply] = {
    operation: _schedule(operation)
    for operation in ("schedule.add", "schedule.list", "schedule.get", "schedule.pause",
                      "schedule.resume", "schedule.delete", "schedule.trigger",
                      "schedule.backfill")
}  # fmt: skip


# --- the operations meant to stop the runner -------------------------------------------------


def _drain_lines(case: Case) -> int:
    return case.server.log.read_text(errors="replace").count("waiting up to")


def _pause(case: Case) -> None:
    """The pause waits for the node to end: released, it parks with the work settled."""
    before = _drain_lines(case)

    def pause() -> None:
        with case.client(timeout=90) as client:
            case.submitted["pause"] = client.pause(case.run_id)

    case.background(pause)
    wait_for(lambda: _drain_lines(case) > before, 30, "the pause to wait for the boundary")
    case.release()
    case.join()
    assert case.submitted["pause"]["status"] == "paused"
    view = case.server.wait_status(case.run_id, "paused")
    assert view["parkReason"] == "userPaused", view
    assert all(e["status"] == "applied" for e in view["effects"]), view["effects"]
    wait_for(lambda: case.server.run(case.run_id)["runner"] is None, 30, "the runner to stop")
    with case.client() as client:
        client.resume(case.run_id)


def _stop(case: Case) -> None:
    """The server drains: released, the run parks at the node's end and the next server
    finishes it."""
    before = _drain_lines(case)

    def stop() -> None:
        with case.client(timeout=90) as client:
            client.stop(wait=True, timeout=90)

    case.background(stop)
    wait_for(lambda: _drain_lines(case) > before, 30, "the stop to drain")
    case.release()
    case.join()
    assert case.server.wait_exit(30) == 0
    [(status, reason)] = case.server.query(
        "SELECT status, park_reason FROM runs WHERE run_id = ?", case.run_id
    )
    assert (status, reason) == ("paused", "serverStopped")
    case.server.start()


def _cancel(case: Case) -> None:
    with case.client() as client:
        client.cancel(case.run_id, reason="cancelled by the test")
    case.release()


STOPS: dict[str, Apply] = {"run.pause": _pause, "server.stop": _stop, "run.cancel": _cancel}

OPERATIONS: dict[str, Apply] = {
    # Reads and subscriptions: they change nothing.
    "server.status": _read("server.status"),
    "workflows.list": _read("workflows.list", lambda c: {"projectDir": str(c.server.project)}),
    "workflows.show": _read(
        "workflows.show", lambda c: {"workflow": "work", "projectDir": str(c.server.project)}
    ),
    "workflows.check": _read(
        "workflows.check",
        lambda c: {"path": str(c.server.project / ".pi" / "workflows" / "work.workflow.py")},
    ),
    "run.list": _read("run.list"),
    "run.get": _read("run.get", run=True),
    "run.settings": _read("run.settings", run=True),
    "run.followUps": _read("run.followUps", run=True),
    "run.history": _read("run.history", run=True),
    "run.logs": _read("run.logs", run=True),
    "run.output": _read("run.output", lambda c: {"nodeId": "hello"}, run=True),
    # A key nobody published: `valueNotPublished`, and the runner is not disturbed.
    "run.value": _refused("run.value", lambda c: {"key": "nothing"}),
    "run.watch": _watch_run,
    "runs.watch": _watch_runs,
    "effect.list": _read("effect.list"),
    "blob.read": _blob,
    "upload.put": _upload,
    "interaction.list": _read("interaction.list"),
    "channel.feed": _read("channel.feed"),
    "decision.get": _refused("decision.get", lambda c: {"requestId": "req_none"}, run=False),
    "session.get": _read("session.get", lambda c: {"sessionId": SESSION}),
    "session.watch": _watch_session,
    "workflowMessage.get": _message_get,
    "state.diagnose": _read("state.diagnose"),
    # Session and presentation bookkeeping: it must never stop the runner.
    "session.attach": _attach,
    "workflowMessage.report": _report_messages,
    "workflowTurn.report": _report_turn,
    "interaction.update": _update,
    # An event the run does not wait for (yet): kept, and the runner is not disturbed.
    "run.signal": lambda c: _call(c, "run.signal", {"name": "later", "data": {"n": 1}}, run=True),
    "run.followUp": lambda c: _call(c, "run.followUp", {"text": "and then?"}, run=True),
    "run.removeFollowUp": lambda c: _call(
        c,
        "run.removeFollowUp",
        {"followUpId": _call(c, "run.followUp", {"text": "never mind"}, run=True)["followUpId"]},
        run=True,
    ),
    "run.changeSettings": lambda c: _call(
        c,
        "run.changeSettings",
        {"patch": [{"op": "replace", "path": "/level", "value": 2}]},
        run=True,
    ),
    # Commands about this run that its state refuses, and commands about other things.
    "run.start": _start_other,
    "run.resume": _refused("run.resume"),
    "run.restart": _refused("run.restart"),
    "run.fork": _refused("run.fork", lambda c: {"fromNode": "hello"}),
    "run.retry": _refused("run.retry"),
    "run.upgrade": _refused("run.upgrade"),
    "checkpoint.answer": _refused("checkpoint.answer", lambda c: {"value": 1}),
    "decision.answer": _refused("decision.answer", lambda c: {"choice": "yes"}),
    "decision.refuse": _refused(
        "decision.refuse",
        lambda c: {"requestId": "req_none", "seat": "channel:x", "person": "p", "reason": "r"},
    ),
    "interaction.submit": _submit_again,
    "effect.resolve": _resolve,
    "effect.get": _effect_get,
    "state.repair": _read("state.repair"),
    "state.backup": _read("state.backup", lambda c: {"path": str(c.gate / "backup.sqlite")}),
    "state.prune": _read("state.prune", lambda c: {"olderThanMs": 10**12, "backup": False}),
    # Schedules: server state of their own; a fire starts a new run.
    **SCHEDULES,
    **STOPS,
}


def test_every_registered_operation_has_a_row() -> None:
    """The table covers the server's registry exactly: a new operation must say how it
    treats a working runner before this test passes again."""
    assert sorted(OPERATIONS) == sorted(registered())


def _begin(server: ServerProcess, tmp_path: Path, kind: str, operation: str) -> Case:
    """Start a run of ``kind`` and return once its work is inside the gate."""
    gate = tmp_path / f"{kind}-{operation}"
    gate.mkdir()
    case = Case(server, kind, gate)
    with case.client() as client:
        started = client.start_run(
            "work", {"kind": kind, "gate": str(gate)}, project_dir=server.project,
            origin_session=SESSION,
        )  # fmt: skip
        case.run_id = str(started["runId"])
        case.epoch = client.attach_session(SESSION)
    if kind == "validation":
        server.wait_status(case.run_id, "waiting")
        case.request_id = str(server.run(case.run_id)["waitingOn"]["requestId"])

        def submit() -> None:
            with case.client(timeout=90, client_id=SUBMITTER) as client:
                try:
                    case.submitted["submit"] = client.submit(
                        case.request_id or "", {"title": "ok"}, idempotency_key=case.run_id
                    )
                except ClientError as exc:
                    case.submitted["refused"] = exc

        case.background(submit)
    wait_for((gate / "started").exists, 30, "the work to start")
    with case.client() as client:
        messages = client.get_run(case.run_id)["messages"]
        [note] = [m for m in messages if m["kind"] == "notification"]
        case.notification = str(note["workflowMessageId"])
        effects = client.list_effects(case.run_id)
        case.effect_id = str(effects[0]["effectId"]) if effects else None
    assert server.run(case.run_id)["status"] == "running"
    return case


def _outcomes(server: ServerProcess, run_id: str) -> list[str]:
    def recorded() -> list[str] | None:
        rows = server.query(
            "SELECT outcome FROM run_runners WHERE run_id = ? ORDER BY runner_epoch", run_id
        )
        found = [row[0] for row in rows]
        return found if found and None not in found else None

    return list(wait_for(recorded, 30, "every runner's exit to be recorded"))


def _check_continued(case: Case, operation: str) -> None:
    view = case.server.wait_status(case.run_id, {"completed", "failed", "paused", "ambiguous"})
    assert view["status"] == "completed", (operation, view)
    # The node after the work started after the change: it saw the new settings.
    assert view["output"]["level"] == (2 if operation == "run.changeSettings" else 1), operation
    applied = case.applied()
    assert len(applied) == 1, (operation, applied)
    assert [e["status"] for e in view["effects"]] in ([], ["applied"]), (operation, view)
    kept = case.server.query(
        "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'effect.kept'", case.run_id
    )
    assert kept == [(0,)], operation
    outcomes = _outcomes(case.server, case.run_id)
    if operation in ("run.pause", "server.stop"):
        assert set(outcomes) <= {"exited", "cancelled"}, (operation, outcomes)
    else:
        assert set(outcomes) == {"exited"}, (operation, outcomes)
        assert len(outcomes) == (2 if case.kind == "validation" else 1), (operation, outcomes)
    if case.kind == "validation":
        if operation == "server.stop":  # the held answer ended with the server: ask again
            stopped = getattr(case.submitted.get("refused"), "code", None)
            assert stopped in (None, "serverStopping", "serverNotRunning"), stopped
            with case.client(client_id=SUBMITTER) as client:
                case.submitted["submit"] = client.submit(
                    case.request_id or "", {"title": "ok"}, idempotency_key=case.run_id
                )
            assert case.submitted["submit"].adopted
        assert case.submitted["submit"]["status"] == "accepted", operation


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", KINDS)
def test_no_operation_makes_a_working_runner_conflict_unless_it_is_meant_to_stop_it(
    server_process: ServerProcess, tmp_path: Path, kind: str
) -> None:
    """Each registered operation, applied while a runner is inside work of ``kind``, leaves
    the runner to finish its work and the run (or, for pause, cancel and server stop, stops
    it cleanly at the work's end or ends the run)."""
    server = server_process.start(PI_WORKFLOWS_DRAIN_SECONDS="60")
    server.write_workflow("work", WORK)
    server.write_workflow("quick", QUICK)
    for operation in registered():  # a missing row fails the test above and here
        case = _begin(server, tmp_path, kind, operation)
        OPERATIONS[operation](case)
        if operation == "run.cancel":
            view = server.wait_status(case.run_id, "cancelled")
            wait_for(lambda c=case: server.run(c.run_id)["runner"] is None, 30, "the runner")
            assert len(case.applied()) <= 1, operation
            assert view["status"] == "cancelled"
            case.join()
            if kind == "validation":  # the held submission hears why: its request closed
                refused = case.submitted.get("refused")
                assert getattr(refused, "code", None) == "requestClosed", refused
        else:
            case.release()
            case.join()
            _check_continued(case, operation)
        problems = server.diagnose()
        assert problems == [], (operation, problems)
        _present_everything(case)
    worked = server.query("SELECT COUNT(*) FROM runs WHERE workflow_name = 'work'")
    assert worked == [(len(registered()),)]  # one run per operation


def _present_everything(case: Case) -> None:
    """What the extension does between cases: report every listed message as present."""
    with case.client() as client:
        epoch = client.attach_session(SESSION)
        while True:
            listed = client.get_session(SESSION)["messages"]
            present = {m["workflowMessageId"]: "entry" for m in listed if m["kind"] != "step"}
            if not present:
                return
            client.report_messages(SESSION, epoch, present)
