"""The definition snapshot (topology as JSON) and its digest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from pi_workflows.authoring import (
    Workflow,
    action,
    agent,
    assistant_message,
    checkpoint,
    choice,
    compute,
    decision,
    edge,
    human_decision,
    idempotent_effect,
    manual_effect,
    minutes,
    notify,
    seconds,
    shell,
    switch,
)
from pi_workflows.authoring import json_problem as json_problem_of
from pi_workflows.engine import SNAPSHOT_SCHEMA, definition_digest, snapshot


def _every_kind(*, reverse_cases: bool = False, label: str = "Apply") -> Workflow:
    cases = {"yes": "apply", "no": "done"}
    if reverse_cases:
        cases = dict(reversed(cases.items()))
    routes = [
        edge("collect", "classify"),
        switch("classify", "$.route", {"fix": "approve", "ignore": "done"}),
        switch("approve", "$.choice", cases),
        switch("apply", "$result.outcome", {"ok": "log", "failed": "ask"}),
        edge("log", "reply"),
        edge("ask", "reply"),
        edge("reply", "done"),
    ]
    return Workflow(
        "every-kind",
        start="collect",
        max_steps=12,
        nodes={
            "collect": compute(lambda ctx: {}),
            "classify": decision("Pick", {"fix": "f", "ignore": "i"}, timeout=minutes(10)),
            "approve": human_decision(
                "Apply?", [choice("yes", label), choice("no", "Skip")], on_timeout=(60.0, "no")
            ),
            "apply": action(lambda ctx: {}, effect=manual_effect("apply-fix")),
            "log": shell(
                ["git", "log"], effect=idempotent_effect("git-read"), allow_exit_codes=[1, 0]
            ),
            "ask": checkpoint("Why?", timeout=seconds(1.5)),
            "reply": agent("Summarise", assistant_message(), timeout=None),
            "done": notify("Finished", kind="final"),
        },
        edges=list(reversed(routes)) if reverse_cases else routes,
    )


def test_snapshot_describes_every_node_kind_and_route() -> None:
    """Nodes carry kind, timeout in ms, effect, choices; edges carry their cases."""
    data = snapshot(_every_kind())
    assert data["schema"] == SNAPSHOT_SCHEMA
    assert (data["name"], data["start"], data["maxSteps"]) == ("every-kind", "collect", 12)
    nodes = data["nodes"]
    assert isinstance(nodes, dict)
    assert nodes["collect"] == {"kind": "compute", "timeoutMs": None}
    assert nodes["apply"] == {
        "kind": "action",
        "timeoutMs": None,
        "effect": {"kind": "manual", "type": "apply-fix"},
    }
    assert nodes["log"] == {
        "kind": "shell",
        "timeoutMs": None,
        "effect": {"kind": "idempotent", "type": "git-read"},
        "allowExitCodes": [0, 1],
    }
    assert nodes["approve"] == {
        "kind": "human_decision",
        "timeoutMs": 60000,
        "choices": [
            {"id": "yes", "label": "Apply", "description": None},
            {"id": "no", "label": "Skip", "description": None},
        ],
        "onTimeout": {"afterMs": 60000, "choice": "no"},
    }
    assert nodes["ask"] == {"kind": "checkpoint", "timeoutMs": 1500, "validates": False}
    assert nodes["done"] == {"kind": "notify", "timeoutMs": None, "notifyKind": "final"}
    classify = nodes["classify"]
    assert isinstance(classify, dict)
    assert classify["kind"] == "agent"
    assert classify["timeoutMs"] == 600000
    assert classify["validates"] is True
    assert classify["routes"] == ["fix", "ignore"]
    reply = nodes["reply"]
    assert isinstance(reply, dict)
    assert reply["assistantMessage"] is True
    assert reply["expectedOutput"] is None
    assert reply["timeoutMs"] is None
    assert data["edges"] == [
        {"from": "apply", "on": "$result.outcome", "default": None,
         "cases": [{"when": "failed", "to": "ask"}, {"when": "ok", "to": "log"}]},
        {"from": "approve", "on": "$.choice", "default": None,
         "cases": [{"when": "no", "to": "done"}, {"when": "yes", "to": "apply"}]},
        {"from": "ask", "to": "reply"},
        {"from": "classify", "on": "$.route", "default": None,
         "cases": [{"when": "fix", "to": "approve"}, {"when": "ignore", "to": "done"}]},
        {"from": "collect", "to": "classify"},
        {"from": "log", "to": "reply"},
        {"from": "reply", "to": "done"},
    ]  # fmt: skip


def test_snapshot_is_plain_json() -> None:
    """The snapshot holds only plain JSON types (no enums), so it can be stored as is."""
    assert json_problem_of(snapshot(_every_kind())) is None


def test_digest_ignores_declaration_order_of_edges_and_cases() -> None:
    """Reordering routes or switch cases does not change the digest."""
    plain = definition_digest(snapshot(_every_kind()))
    reordered = definition_digest(snapshot(_every_kind(reverse_cases=True)))
    assert plain == reordered
    assert len(plain) == 64


def test_digest_changes_when_the_definition_changes() -> None:
    """A different choice label is a different definition."""
    assert definition_digest(snapshot(_every_kind())) != definition_digest(
        snapshot(_every_kind(label="Go"))
    )


def test_digest_is_stable_across_processes_and_hash_seeds(tmp_path: Path) -> None:
    """Two interpreters with different hash seeds compute the same digest."""
    script = tmp_path / "digest.py"
    script.write_text(
        "import sys\n"
        "from pi_workflows import sources, engine\n"
        "ref = sources.resolve(sys.argv[1], None)\n"
        "print(sources.load(ref).digest)\n",
        encoding="utf-8",
    )
    example = Path(__file__).resolve().parents[2] / "examples" / "workflows"
    target = str(example / "triage.workflow.py")
    digests = set()
    for seed in ("0", "1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, str(script), target],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=60,
        )
        digests.add(done.stdout.strip())
    assert len(digests) == 1
    (digest,) = digests
    assert len(digest) == 64


def test_snapshot_survives_a_json_round_trip_with_the_same_digest() -> None:
    """The server can store the snapshot as JSON and recompute the same digest."""
    data = snapshot(_every_kind())
    assert definition_digest(json.loads(json.dumps(data))) == definition_digest(data)
