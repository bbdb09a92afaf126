"""Live settings through real processes: a change, its number and the attempts that see it.

Each workflow writes what its callbacks saw (``ctx.settings``, ``ctx.settings_change``) to a
witness file outside the database, and blocks at a gate file where a test must change the
settings while an attempt is in flight (a running node, a waiting checkpoint, a paused run,
a ``settings_route`` that evaluates). The tests change settings with the real CLI and the
Python client and check what every attempt saw, what was recorded, and ``state diagnose``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pi_workflows.client import ConflictError, RejectedError

from support.server import ServerProcess, wait_for

SETTINGS = """
import json, time
from pathlib import Path
from pi_workflows import (Workflow, checkpoint, compute, edge, settings_route, subworkflow,
                          switch)

SCHEMA = {
    "type": "object",
    "properties": {
        "level": {"type": "integer", "minimum": 1, "maximum": 5, "default": 1},
        "mode": {"enum": ["slow", "fast"], "default": "slow"},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
    },
    "required": ["level", "mode"],
    "additionalProperties": False,
}


def seen(ctx, what):
    with open(ctx.input["witness"], "a") as out:
        out.write(json.dumps({"node": ctx.node_id, "what": what, "change": ctx.settings_change,
                              "settings": ctx.settings}) + "\\n")


def gate(ctx, name):
    path = Path(ctx.input["gates"]) / name
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def slow(ctx):
    seen(ctx, "start")
    gate(ctx, f"{ctx.node_id}-{ctx.visit}")
    seen(ctx, "end")
    return {"level": ctx.settings["level"]}


def record(ctx):
    seen(ctx, "run")
    return {"change": ctx.settings_change}


def check(answer, ctx):
    seen(ctx, "validate")


def route(ctx):
    seen(ctx, "route")
    gate(ctx, f"route-{ctx.settings_change}")
    return {"route": ctx.settings["mode"]}


workflow = Workflow(
    "tuned",
    start="begin",
    nodes={
        "begin": compute(lambda ctx: {"go": ctx.input["start"]}),
        "slow": compute(slow),
        "ask": checkpoint("Go on?", validate=check),
        "pick": settings_route(route),
        "fast": compute(record),
        "careful": compute(record),
        "after": compute(record),
    },
    edges=[
        switch("begin", on="$.go", cases={"slow": "slow", "ask": "ask", "pick": "pick"}),
        edge("slow", "ask"),
        edge("ask", "pick"),
        switch("pick", on="$.route", cases={"fast": "fast", "slow": "careful"}),
        edge("fast", "after"),
        edge("careful", "after"),
    ],
    settings=SCHEMA,
    settings_changed_by=CHANGED_BY,
)
"""


def _workflow(server: ServerProcess, *, changed_by: str = "'person'") -> None:
    server.write_workflow("tuned", SETTINGS.replace("CHANGED_BY", changed_by))


def _start(server: ServerProcess, tmp_path: Path, start: str = "slow") -> tuple[str, Path, Path]:
    witness, gates = tmp_path / "witness.jsonl", tmp_path / "gates"
    gates.mkdir(exist_ok=True)
    run_input = {"witness": str(witness), "gates": str(gates), "start": start}
    return server.start_run("tuned", run_input), witness, gates


def _seen(witness: Path) -> list[dict[str, Any]]:
    if not witness.exists():
        return []
    return [json.loads(line) for line in witness.read_text().splitlines()]


def _saw(witness: Path, node: str, what: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        for entry in _seen(witness):
            if entry["node"] == node and entry["what"] == what:
                return entry
        return None

    return dict(wait_for(find, 60, f"node {node} to {what}"))


def _replace(path: str, value: Any) -> list[dict[str, Any]]:
    return [{"op": "replace", "path": path, "value": value}]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_change_reaches_only_attempts_that_start_after_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A change made while a node runs is not seen by that node's attempt (nor by the
    checkpoint's validate, whose attempt started before a second change while it waited)
    and is seen by every attempt that starts after it; each attempt records the number."""
    _workflow(server)
    run_id, witness, gates = _start(server, tmp_path)
    assert _saw(witness, "slow", "start")["settings"] == {"level": 1, "mode": "slow", "tags": []}
    with server.client() as client:
        first = client.change_settings(run_id, _replace("/level", 3))
        assert (first["change"], first["settings"]["level"]) == (1, 3)
        (gates / "slow-1").touch()
        server.wait_status(run_id, "waiting")
        ended = _saw(witness, "slow", "end")
        assert (ended["change"], ended["settings"]["level"]) == (0, 1)
        second = client.change_settings(
            run_id, [{"op": "add", "path": "/tags/-", "value": "x"}], expect_change=1
        )
        assert second["change"] == 2
        request_id = server.run(run_id)["waitingOn"]["requestId"]
        client.answer_checkpoint(run_id, {"ok": True}, request_id)
        (gates / "route-2").touch()
        server.wait_status(run_id, "completed")
    checked = _saw(witness, "ask", "validate")
    assert checked["change"] == 1  # the checkpoint's attempt started after change 1
    assert _saw(witness, "pick", "route")["change"] == 2
    assert _saw(witness, "careful", "run")["settings"] == {
        "level": 3,
        "mode": "slow",
        "tags": ["x"],
    }
    recorded = dict(
        server.query("SELECT node_id, settings_change FROM node_attempts WHERE run_id = ?", run_id)
    )
    assert recorded == {"begin": 0, "slow": 0, "ask": 1, "pick": 2, "careful": 2, "after": 2}
    view = server.run(run_id)
    assert view["settings"]["change"] == 2
    assert {a["nodeId"]: a["settingsChange"] for a in view["attempts"]} == recorded
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_settings_route_is_evaluated_again_when_settings_change_before_its_route_commits(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A ``settings_route`` evaluating with mode slow while a person switches to fast is
    evaluated again with the new settings, and the run takes the fast route; the attempt
    records the change it was evaluated again with and history the re-evaluation."""
    _workflow(server)
    run_id, witness, gates = _start(server, tmp_path, "pick")
    assert _saw(witness, "pick", "route")["settings"]["mode"] == "slow"
    with server.client() as client:
        client.change_settings(run_id, _replace("/mode", "fast"))
    (gates / "route-0").touch()
    (gates / "route-1").touch()
    server.wait_status(run_id, "completed")
    routes = [e for e in _seen(witness) if e["node"] == "pick"]
    assert [(e["change"], e["settings"]["mode"]) for e in routes] == [(0, "slow"), (1, "fast")]
    assert [e["node"] for e in _seen(witness) if e["what"] == "run"] == ["fast", "after"]
    assert server.query(
        "SELECT settings_change, status FROM node_attempts WHERE run_id = ? AND node_id = 'pick'",
        run_id,
    ) == [(1, "completed")]
    reevaluated = server.query(
        "SELECT data_json FROM events WHERE run_id = ? AND type = 'node.reevaluated'", run_id
    )
    assert [json.loads(row[0])["to"] for row in reevaluated] == [1]
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_paused_run_takes_changes_and_resumes_with_them(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Settings change while the run is paused at its checkpoint; after resume and the
    answer, the next attempts see the newest settings."""
    _workflow(server)
    run_id, witness, gates = _start(server, tmp_path, "ask")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.pause(run_id)
        server.wait_status(run_id, "paused")
        client.change_settings(run_id, _replace("/mode", "fast"))
        client.change_settings(run_id, _replace("/level", 5))
        client.resume(run_id)
        server.wait_status(run_id, "waiting")
        request_id = server.run(run_id)["waitingOn"]["requestId"]
        client.answer_checkpoint(run_id, "yes", request_id)
    (gates / "route-2").touch()
    server.wait_status(run_id, "completed")
    assert _saw(witness, "ask", "validate")["change"] == 0
    assert _saw(witness, "fast", "run")["settings"]["level"] == 5
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_refused_changes_change_nothing(server: ServerProcess, tmp_path: Path) -> None:
    """A malformed patch, a patch that does not apply, a result the schema refuses, a stale
    ``expect_change``, a change by the model the workflow does not allow, and a change to a
    workflow without settings are each refused with one line, and no revision, change
    number or row moves."""
    _workflow(server)
    run_id, _, _ = _start(server, tmp_path, "ask")
    server.wait_status(run_id, "waiting")
    before = server.query("SELECT revision, settings_change FROM runs WHERE run_id = ?", run_id)
    with server.client() as client:
        cases: list[tuple[list[Any], dict[str, Any], str]] = [
            ([{"op": "remove", "path": "/nothing"}], {}, "does not apply"),
            (_replace("/level", 9), {}, "settings.level: 9 is greater than the maximum of 5"),
            ([{"op": "add", "path": "/colour", "value": "red"}], {}, "Additional properties"),
            ([{"op": "test", "path": "/mode", "value": "fast"}], {}, "does not apply"),
        ]
        for patch, kwargs, words in cases:
            with pytest.raises(RejectedError) as refused:
                client.change_settings(run_id, patch, **kwargs)
            assert refused.value.code == "settingsRefused"
            assert words in str(refused.value)
            assert "\n" not in str(refused.value)
        with pytest.raises(ConflictError) as stale:
            client.change_settings(run_id, _replace("/level", 2), expect_change=4)
        assert stale.value.code == "settingsConflict"
        assert "at change 0, not 4" in str(stale.value)
        with pytest.raises(RejectedError) as model:
            client.call(
                "run.changeSettings",
                {"patch": _replace("/level", 2), "changedBy": "model"},
                run_id=run_id,
            )
        assert "lets person change its settings, not the model" in str(model.value)
        with pytest.raises(RejectedError) as malformed:
            client.change_settings(run_id, [{"op": "nope", "path": "/level"}])
        assert malformed.value.code == "badRequest"
    assert (
        server.query("SELECT revision, settings_change FROM runs WHERE run_id = ?", run_id)
        == before
    )
    assert server.query("SELECT COUNT(*) FROM run_settings WHERE run_id = ?", run_id) == [(1,)]
    server.write_workflow(
        "plain",
        "from pi_workflows import Workflow, checkpoint\n"
        "workflow = Workflow('plain', start='a', nodes={'a': checkpoint('q')})\n",
    )
    plain = server.start_run("plain")
    server.wait_status(plain, "waiting")
    with server.client() as client, pytest.raises(RejectedError) as none:
        client.change_settings(plain, _replace("/level", 2))
    assert "declares no settings" in str(none.value)
    assert server.run(plain)["settings"] is None
    assert server.diagnose() == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_model_changes_settings_only_where_the_workflow_allows_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    """With ``settings_changed_by=("person", "model")`` a change sent as the model's is
    applied and recorded as the model's."""
    _workflow(server, changed_by="('person', 'model')")
    run_id, _, _ = _start(server, tmp_path, "ask")
    server.wait_status(run_id, "waiting")
    with server.client() as client:
        client.call(
            "run.changeSettings",
            {"patch": _replace("/level", 2), "changedBy": "model"},
            run_id=run_id,
        )
        view = client.settings(run_id)
    assert view["changedBy"] == ["model", "person"]
    assert [(h["change"], h["changedBy"]) for h in view["history"]] == [
        (0, "defaults"),
        (1, "model"),
    ]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_cli_shows_and_changes_settings(server: ServerProcess, tmp_path: Path) -> None:
    """``run settings`` prints the settings and their changes, ``--patch`` applies one (and
    its ``--json`` receipt), and a stale ``--expect-change`` exits non-zero with one line
    naming the current number."""
    _workflow(server)
    run_id, _, _ = _start(server, tmp_path, "ask")
    server.wait_status(run_id, "waiting")
    shown = server.cli("run", "settings", run_id)
    assert shown.returncode == 0, shown.stderr
    assert f"run {run_id}: settings at change 0 (changed by person)" in shown.stdout
    changed = server.cli(
        "run", "settings", run_id, "--patch", json.dumps(_replace("/level", 4)), "--json"
    )
    assert changed.returncode == 0, changed.stderr
    assert json.loads(changed.stdout)["change"] == 1
    stale = server.cli(
        "run", "settings", run_id, "--patch", json.dumps(_replace("/level", 2)),
        "--expect-change", "0",
    )  # fmt: skip
    assert stale.returncode != 0
    assert len(stale.stderr.strip().splitlines()) == 1
    assert "at change 1, not 0" in stale.stderr
    bad = server.cli("run", "settings", run_id, "--patch", '{"op": "replace"}')
    assert bad.returncode == 2
    assert "a JSON Patch is a JSON list of operations" in bad.stderr
    again = server.cli("run", "settings", run_id)
    assert "   1  person: [" in again.stdout
    assert '"level": 4' in again.stdout
