"""Events a run waits for, through real processes: kept, ordered, consumed exactly once.

The workflow waits for ``deployed`` (optionally validating it) and records, in a witness
file outside the database, every event its successor node saw. The tests send events with
the real CLI or the Python client, before and during the wait, across server kills, racing
the wait's timeout, with repeated keys and bad input, and check what the run consumed,
what the senders were told, and ``state diagnose``.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from pi_workflows.client import ConflictError, NotFoundError, RejectedError

from support.durable import holds_nothing, now_ms
from support.server import ServerProcess, wait_for

GATE = """
from pathlib import Path
from pi_workflows import (Rejected, Workflow, compute, edge, seconds, sleep, switch,
                          wait_event)


def record(ctx):
    with open(ctx.input["witness"], "a") as out:
        out.write(__import__("json").dumps(ctx.outputs["deployed"]) + "\\n")
    return {"got": ctx.outputs["deployed"]}


def check(data, ctx):
    if not isinstance(data, dict) or data.get("version") != ctx.input.get("version"):
        raise Rejected(f"wrong version: want {ctx.input.get('version')!r}")


workflow = Workflow(
    "gate",
    start="first",
    nodes={
        "first": FIRST,
        "deployed": wait_event("deployed", timeout=TIMEOUT, validate=VALIDATE),
        "record": compute(record),
        "late": compute(lambda ctx: {"late": True}),
    },
    edges=[
        edge("first", "deployed"),
        switch("deployed", on="$result.outcome", cases={"ok": "record", "timed_out": "late"}),
    ],
)
"""


def _gate(
    server: ServerProcess,
    *,
    first: str = "compute(lambda ctx: {})",
    timeout: str = "seconds(60)",
    validate: str = "None",
) -> None:
    source = GATE.replace("FIRST", first).replace("TIMEOUT", timeout).replace("VALIDATE", validate)
    server.write_workflow("gate", source)


def _seen(witness: Path) -> list[object]:
    return (
        [json.loads(line) for line in witness.read_text().splitlines()] if witness.exists() else []
    )


def _cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return server.cli(*args, timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_event_wakes_a_waiting_run_and_becomes_the_node_output(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The run waits with no runner; ``run signal`` (the real CLI) wakes it at once, the
    event's data is the node's output, and the event is consumed by that attempt."""
    _gate(server)
    witness = tmp_path / "w.jsonl"
    run_id = server.start_run("gate", {"witness": str(witness)})
    view = server.wait_status(run_id, "waiting", 30)
    assert (view["wait"]["kind"], view["wait"]["event"]) == ("event", "deployed")
    holds_nothing(server, run_id)
    sent = _cli(server, "run", "signal", run_id, "deployed", "--data", '{"version": "1"}')
    assert sent.returncode == 0, sent.stderr
    assert "continues" in sent.stdout
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["output"] == {"got": {"version": "1"}}
    assert _seen(witness) == [{"version": "1"}]
    [(status, attempt)] = server.query(
        "SELECT status, attempt_id FROM run_signals WHERE run_id = ?", run_id
    )
    assert status == "consumed"
    assert server.query("SELECT node_id FROM node_attempts WHERE attempt_id = ?", attempt) == [
        ("deployed",)
    ]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_events_sent_before_the_wait_are_kept_and_consumed_in_order_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Two events sent while the run is still in a 2 s sleep before its wait: the wait
    takes the older one without ever waiting; the newer one stays pending."""
    _gate(server, first="sleep(seconds(2))")
    witness = tmp_path / "w.jsonl"
    run_id = server.start_run("gate", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    with server.client() as client:
        one = client.signal(run_id, "deployed", {"n": 1})
        two = client.signal(run_id, "deployed", {"n": 2})
    assert (one["status"], one["seq"], one["woke"]) == ("pending", 1, False)
    assert two["seq"] == 2
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["output"] == {"got": {"n": 1}}
    assert server.query(
        "SELECT seq, status FROM run_signals WHERE run_id = ? ORDER BY seq", run_id
    ) == [(1, "consumed"), (2, "pending")]
    assert done["signalsPending"] == 1
    assert _seen(witness) == [{"n": 1}]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_repeated_key_adopts_the_first_event_and_a_changed_one_conflicts(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The same key twice (two clients) stores one event; the same key with other data is
    a conflict and stores nothing."""
    _gate(server, first="sleep(seconds(30))")
    run_id = server.start_run("gate", {"witness": str(tmp_path / "w.jsonl")})
    server.wait_status(run_id, "waiting", 30)
    with server.client() as first, server.client() as second:
        sent = first.signal(run_id, "deployed", {"v": 1}, idempotency_key="deploy-1")
        again = second.signal(run_id, "deployed", {"v": 1}, idempotency_key="deploy-1")
        assert again.adopted
        assert again["signalId"] == sent["signalId"]
        with pytest.raises(ConflictError, match="deploy-1"):
            second.signal(run_id, "deployed", {"v": 2}, idempotency_key="deploy-1")
    assert server.query("SELECT COUNT(*) FROM run_signals WHERE run_id = ?", run_id) == [(1,)]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_wait_that_times_out_routes_timed_out_and_keeps_a_later_event(
    server: ServerProcess, tmp_path: Path
) -> None:
    """No event within 1 s: the node ends ``timed_out`` and routes to ``late``; an event
    sent after that is refused (the run has ended)."""
    _gate(server, timeout="seconds(1)")
    run_id = server.start_run("gate", {"witness": str(tmp_path / "w.jsonl")})
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["output"] == {"late": True}
    with server.client() as client, pytest.raises(RejectedError, match="has ended"):
        client.signal(run_id, "deployed", {"v": 1})
    assert server.query("SELECT COUNT(*) FROM run_signals WHERE run_id = ?", run_id) == [(0,)]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_validating_wait_answers_a_refused_event_and_takes_a_good_one(
    server: ServerProcess, tmp_path: Path
) -> None:
    """With ``validate``: the sender of a wrong event hears the node's message (the reply is
    held until a runner checked it), the event is rejected and never consumed, the run waits
    on; the right event is answered ``consumed``."""
    _gate(server, validate="check")
    witness = tmp_path / "w.jsonl"
    run_id = server.start_run("gate", {"witness": str(witness), "version": "2"})
    server.wait_status(run_id, "waiting", 30)
    wrong = _cli(server, "run", "signal", run_id, "deployed", "--data", '{"version": "1"}')
    assert wrong.returncode != 0
    assert "wrong version: want '2'" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
    server.wait_status(run_id, "waiting", 30)
    with server.client() as client:
        good = client.signal(run_id, "deployed", {"version": "2"})
    assert good["status"] == "consumed"
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["output"] == {"got": {"version": "2"}}
    assert server.query(
        "SELECT seq, status FROM run_signals WHERE run_id = ? ORDER BY seq", run_id
    ) == [(1, "rejected"), (2, "consumed")]
    assert _seen(witness) == [{"version": "2"}]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_an_event_wait_survives_a_server_kill(server: ServerProcess, tmp_path: Path) -> None:
    """SIGKILL while the run waits for its event, restart: it still waits (same timeout),
    and an event sent to the new server is consumed once."""
    _gate(server)
    witness = tmp_path / "w.jsonl"
    run_id = server.start_run("gate", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    [(due,)] = server.query("SELECT due_at FROM run_waits WHERE run_id = ?", run_id)
    server.kill()
    server.start()
    view = server.run(run_id)
    assert view["status"] == "waiting"
    assert view["wait"]["dueAt"] == due
    with server.client() as client:
        client.signal(run_id, "deployed", {"after": "restart"})
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["output"] == {"got": {"after": "restart"}}
    assert _seen(witness) == [{"after": "restart"}]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_an_event_racing_the_timeout_gives_exactly_one_outcome(
    server: ServerProcess, tmp_path: Path
) -> None:
    """An event sent at the very moment the 1 s timeout comes due (several senders at
    once): the run ends once, either with the event consumed or timed out with the event
    kept; never both, never neither."""
    for attempt in range(3):
        _gate(server, timeout="seconds(1)")
        witness = tmp_path / f"w{attempt}.jsonl"
        run_id = server.start_run("gate", {"witness": str(witness)})
        server.wait_status(run_id, "waiting", 30)
        [(due,)] = server.query("SELECT due_at FROM run_waits WHERE run_id = ?", run_id)
        wait_for(lambda due=due: now_ms() >= due - 5, 10, "the timeout's moment")
        errors: list[Exception] = []

        def send(n: int, run_id: str = run_id, errors: list[Exception] = errors) -> None:
            try:
                with server.client() as client:
                    client.signal(run_id, "deployed", {"n": n})
            except RejectedError as exc:  # the run already ended: refused, nothing stored
                errors.append(exc)

        threads = [threading.Thread(target=send, args=(n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        done = server.wait_status(run_id, {"completed", "failed"}, 30)
        consumed = server.query(
            "SELECT COUNT(*) FROM run_signals WHERE run_id = ? AND status = 'consumed'", run_id
        )[0][0]
        if done["output"] == {"late": True}:
            assert consumed == 0
            assert _seen(witness) == []
        else:
            assert consumed == 1
            assert len(_seen(witness)) == 1
        assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_pause_resume_and_cancel_apply_during_an_event_wait(
    server: ServerProcess, tmp_path: Path
) -> None:
    """An event sent to a paused run wakes nothing until ``run resume``; cancelling another
    waiting run cancels its wait and leaves its events unconsumed."""
    _gate(server)
    witness = tmp_path / "w.jsonl"
    run_id = server.start_run("gate", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    with server.client() as client:
        client.pause(run_id)
        sent = client.signal(run_id, "deployed", {"v": "paused"})
        assert sent["woke"] is True  # its wait took it, but the pause holds the run
        assert server.run(run_id)["status"] == "paused"
        assert _seen(witness) == []
        client.resume(run_id)
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["output"] == {"got": {"v": "paused"}}
    other = server.start_run("gate", {"witness": str(tmp_path / "o.jsonl")})
    server.wait_status(other, "waiting", 30)
    with server.client() as client:
        client.cancel(other)
    assert server.query("SELECT status FROM run_waits WHERE run_id = ?", other) == [("cancelled",)]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_bad_events_are_refused_with_one_line_and_nothing_stored(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Unknown runs, malformed names, oversized or non-JSON data: one line, non-zero exit,
    no event stored."""
    _gate(server)
    run_id = server.start_run("gate", {"witness": str(tmp_path / "w.jsonl")})
    server.wait_status(run_id, "waiting", 30)
    cases = [
        (["run", "signal", "run_nope", "deployed"], "no run with id run_nope"),
        (["run", "signal", run_id, "9lives"], "malformed"),
        (["run", "signal", run_id, "has space"], "malformed"),
        (["run", "signal", run_id, "x" * 200], "limit is 128"),
        (["run", "signal", run_id, "deployed", "--data", "{not json"], "JSON"),
    ]
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"blob": "x" * 300_000}))
    cases.append((["run", "signal", run_id, "deployed", "--data", f"@{big}"], "limit"))
    for args, message in cases:
        result = _cli(server, *args)
        assert result.returncode != 0, args
        assert message in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    with server.client() as client, pytest.raises(NotFoundError):
        client.signal("run_missing", "deployed")
    assert server.query("SELECT COUNT(*) FROM run_signals") == [(0,)]
    assert server.run(run_id)["status"] == "waiting"
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_restart_takes_no_event_of_the_old_round(server: ServerProcess, tmp_path: Path) -> None:
    """An event kept by a round that never took it is discarded by a restart of the waiting
    run (no pause needed): the new round waits for a new event, and takes that one."""
    _gate(server, first="sleep(seconds(30))")
    witness = tmp_path / "w.jsonl"
    run_id = server.start_run("gate", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    with server.client() as client:
        client.signal(run_id, "deployed", {"round": 0})
        client.restart(run_id)
    assert server.query("SELECT status FROM run_signals WHERE run_id = ?", run_id) == [
        ("discarded",)
    ]
    assert sorted(server.query("SELECT status FROM run_waits WHERE run_id = ?", run_id))[0] == (
        "cancelled",
    )
    view = server.wait_status(run_id, "waiting", 30)
    assert view["wait"]["kind"] == "sleep"  # the new round sleeps afresh
    assert view["signalsPending"] == 0
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_an_event_sent_again_with_its_key_after_a_restart_reaches_the_new_round(
    server: ServerProcess, tmp_path: Path
) -> None:
    """An event sent (with a key) while the run waits on a checkpoint before its wait is
    discarded by ``run restart``; the same event sent again with the same key is a new event
    the new round takes (the CLI never says a discarded event is kept), not an adoption of
    the discarded one, which would leave the new round waiting for ever."""
    _gate(server, first='checkpoint({"question": "go?"})')
    server.write_workflow(
        "gate", (server.project / ".pi" / "workflows" / "gate.workflow.py").read_text().replace(
            "from pi_workflows import (", "from pi_workflows import (checkpoint, "
        ),
    )  # fmt: skip
    witness = tmp_path / "w.jsonl"
    run_id = server.start_run("gate", {"witness": str(witness)})
    server.wait_status(run_id, "waiting", 30)
    args = ("run", "signal", run_id, "deployed", "--data", '{"v": 1}', "--idempotency-key", "k1")
    first = _cli(server, *args)
    assert first.returncode == 0, first.stderr
    assert "kept until the run waits for 'deployed'" in first.stdout
    restarted = _cli(server, "run", "restart", run_id)
    assert restarted.returncode == 0, restarted.stderr
    server.wait_status(run_id, "waiting", 30)
    assert server.query("SELECT status FROM run_signals WHERE run_id = ?", run_id) == [
        ("discarded",)
    ]
    again = _cli(server, *args)
    assert again.returncode == 0, again.stderr
    assert "#2" in again.stdout
    assert "adopted" not in again.stdout
    with server.client() as client:
        client.answer_checkpoint(run_id, {"go": True})
    done = server.wait_status(run_id, {"completed", "failed"}, 30)
    assert done["output"] == {"got": {"v": 1}}
    assert server.query(
        "SELECT seq, status FROM run_signals WHERE run_id = ? ORDER BY seq", run_id
    ) == [(1, "discarded"), (2, "consumed")]
    assert server.diagnose() == []
