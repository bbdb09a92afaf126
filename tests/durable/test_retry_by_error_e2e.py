"""Retry by error through real processes: a policy selects tries by the class of what the
node raised (a subclass matches), by a predicate, and ``never`` wins over ``on``.

The node raises, try after try, the exceptions its input lists (then succeeds). Each test
checks the attempts the server recorded, the error class the history records for each
failed try, and the delays the runner asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.durable import attempts
from support.server import ServerProcess

ERRORS = """
from pathlib import Path

from pi_workflows import Workflow, action, compute, idempotent_effect, retry, switch


class RateLimited(Exception):
    status = 429


class SlowDown(RateLimited):
    pass


class BadRequest(Exception):
    status = 400


KINDS = {"RateLimited": RateLimited, "SlowDown": SlowDown, "BadRequest": BadRequest}


def call(ctx):
    errors = ctx.input["errors"]
    index = _count(ctx)
    if index < len(errors):
        raise KINDS[errors[index]](f"try {index + 1}")
    return {"tries": index + 1}


def _count(ctx):
    witness = Path(ctx.input["witness"])
    seen = witness.read_text().count("x") if witness.exists() else 0
    witness.write_text("x" * (seen + 1))
    return seen


POLICY

workflow = Workflow(
    "errors",
    start="call",
    nodes={
        "call": action(call, effect=idempotent_effect("call"), retry=policy),
        "done": compute(lambda ctx: {"result": ctx.outputs["call"]}),
        "gave_up": compute(lambda ctx: {"error": ctx.results["call"]["error"]}),
    },
    edges=[switch("call", on="$result.outcome",
                  cases={"ok": "done", "failed": "gave_up", "timed_out": "gave_up"})],
)
"""


def _run(server: ServerProcess, tmp_path: Path, policy: str, errors: list[str]) -> dict[str, Any]:
    server.write_workflow("errors", ERRORS.replace("POLICY", f"policy = {policy}"))
    run_id = server.start_run("errors", {"errors": errors, "witness": str(tmp_path / "w")})
    done = server.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert done["status"] == "completed", done
    return done


def _failures(server: ServerProcess, run_id: str) -> list[tuple[str, str | None, str | None]]:
    """``(event type, error class's last part, retry note)`` of each failed try's event."""
    with server.client() as client:
        history = client.history(run_id)
    found = []
    for entry in history:
        data = entry.get("data") or {}
        if (
            entry["type"] in ("node.retried", "node.finished")
            and data.get("outcome") != "completed"
        ):
            named = data.get("errorClass")
            found.append(
                (
                    entry["type"],
                    None if named is None else named.rsplit(".", 1)[-1],
                    data.get("retryNote"),
                )
            )
    return found


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_rate_limit_is_retried_and_a_bad_request_is_not(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``on=(RateLimited, "timed_out")``: a RateLimited try is retried, the BadRequest after
    it is routed as a failure; the history records each try's error class."""
    done = _run(
        server,
        tmp_path,
        'retry(attempts=5, delay=0, on=(RateLimited, "timed_out"))',
        ["RateLimited", "BadRequest"],
    )
    run_id = done["runId"]
    assert done["output"] == {"error": "BadRequest: try 2"}
    assert [row[3] for row in attempts(server, run_id, "call")] == ["retried", "failed"]
    assert _failures(server, run_id) == [
        ("node.retried", "RateLimited", None),
        ("node.finished", "BadRequest", None),
    ]
    [(full,)] = server.query(
        "SELECT json_extract(data_json, '$.errorClass') FROM events WHERE run_id = ?"
        " AND type = 'node.retried'",
        run_id,
    )
    with server.client() as client:
        details = [e["detail"] for e in client.history(run_id) if e["type"] == "node.retried"]
    assert details == ["failed (raised RateLimited) (try 1); tried again at once"]
    assert full.endswith(".RateLimited")
    assert full != "RateLimited"
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_subclass_of_a_listed_class_is_retried(server: ServerProcess, tmp_path: Path) -> None:
    """SlowDown inherits from RateLimited: ``on=(RateLimited,)`` retries it; the history
    records the raised class (SlowDown), not the listed one."""
    done = _run(server, tmp_path, "retry(attempts=3, delay=0, on=(RateLimited,))", ["SlowDown"])
    assert done["output"] == {"result": {"tries": 2}}
    assert _failures(server, done["runId"]) == [("node.retried", "SlowDown", None)]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_never_wins_over_on(server: ServerProcess, tmp_path: Path) -> None:
    """``on=("failed",), never=(BadRequest,)``: every failure is retried except a
    BadRequest, which routes at once with a note saying why."""
    done = _run(
        server,
        tmp_path,
        'retry(attempts=5, delay=0, on=("failed",), never=(BadRequest,))',
        ["SlowDown", "BadRequest"],
    )
    assert done["output"] == {"error": "BadRequest: try 2"}
    [retried, routed] = _failures(server, done["runId"])
    assert retried == ("node.retried", "SlowDown", None)
    assert routed[:2] == ("node.finished", "BadRequest")
    assert routed[2] is not None
    assert "BadRequest is listed in never" in routed[2]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_predicate_selects_by_what_the_error_carries(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``on=lambda error: error.status == 429``: both rate-limit classes are retried, the
    400 is not."""
    done = _run(
        server,
        tmp_path,
        'retry(attempts=5, delay=0, on=lambda error: getattr(error, "status", 0) == 429)',
        ["RateLimited", "SlowDown", "BadRequest"],
    )
    assert done["output"] == {"error": "BadRequest: try 3"}
    assert [row[3] for row in attempts(server, done["runId"], "call")] == [
        "retried",
        "retried",
        "failed",
    ]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_predicate_that_raises_means_do_not_retry_and_is_recorded(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A predicate that raises does not retry: the failure routes, and the history's note
    names what the predicate raised."""
    done = _run(
        server,
        tmp_path,
        "retry(attempts=5, delay=0, on=lambda error: error.nothing)",
        ["BadRequest"],
    )
    assert done["output"] == {"error": "BadRequest: try 1"}
    [(kind, named, note)] = _failures(server, done["runId"])
    assert (kind, named) == ("node.finished", "BadRequest")
    assert note is not None
    assert "retry predicate raised AttributeError" in note


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_runner_asks_for_the_policys_backoff_delays(
    server: ServerProcess, tmp_path: Path
) -> None:
    """With delay 0.1 s, backoff 3 and no jitter, the three retries wait 100, 300 and 900 ms:
    the first retry waits ``delay`` (not ``delay * backoff``), each later one ``backoff``
    times longer, and the durable waits the server kept are exactly those."""
    done = _run(
        server,
        tmp_path,
        "retry(attempts=4, delay=0.1, backoff=3.0, jitter=0, on=(RateLimited,))",
        ["RateLimited", "RateLimited", "RateLimited"],
    )
    run_id = done["runId"]
    assert done["output"] == {"result": {"tries": 4}}
    delays = server.query(
        "SELECT json_extract(data_json, '$.delayMs') FROM events WHERE run_id = ?"
        " AND type = 'node.retried' ORDER BY event_id",
        run_id,
    )
    assert delays == [(100,), (300,), (900,)]
    waited = server.query(
        "SELECT due_at - created_at FROM run_waits WHERE run_id = ? AND kind = 'retry'"
        " ORDER BY created_at",
        run_id,
    )
    assert waited == [(100,), (300,), (900,)]


def test_a_failure_adopted_after_a_crash_is_classified_by_its_recorded_class(
    server_process: ServerProcess, tmp_path: Path
) -> None:
    """Crash window: the server dies right after the runner recorded the rejected effect of
    a RateLimited try, before the retry committed. The next runner adopts that try's
    failure (the body does not run again for it) and classifies it by the class names the
    effect recorded: ``on=(RateLimited,)`` retries it, and the history still says
    RateLimited. Replaying the window adopts once and retries once."""
    source = ERRORS.replace("POLICY", "policy = retry(attempts=3, delay=0, on=(RateLimited,))")
    server_process.write_workflow("errors", source)
    server_process.start(faults="runner.effect.settle.after_commit=exit")
    witness = tmp_path / "w"
    run_id = server_process.start_run("errors", {"errors": ["SlowDown"], "witness": str(witness)})
    assert server_process.wait_exit() == 137
    server_process.remember_children()
    [(recorded,)] = server_process.query(
        "SELECT json_extract(result_json, '$.errorClasses[0]') FROM effects WHERE run_id = ?",
        run_id,
    )
    assert recorded.endswith(".SlowDown")
    server_process.start()
    done = server_process.wait_status(run_id, {"completed", "failed", "paused"}, 60)
    assert done["status"] == "completed", done
    assert done["output"] == {"result": {"tries": 2}}
    assert witness.read_text() == "xx"  # the body ran once per try, not again for the first
    assert _failures(server_process, run_id) == [("node.retried", "SlowDown", None)]
    assert server_process.diagnose() == []
