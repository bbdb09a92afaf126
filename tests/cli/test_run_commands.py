"""`run` commands send the documented requests and map answers to output and exit codes."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from client.scripted_peer import Reply, ok, refuse, scripted_peer
from pi_workflows.protocol import Outcome, Request
from pi_workflows.protocol.environment import snapshot

Invoke = Callable[..., Result]


def run_view(status: str, **changes: Any) -> dict[str, Any]:
    """A RunView shaped as docs/protocol.md describes it."""
    view: dict[str, Any] = {
        "runId": "run_1",
        "workflow": "demo",
        "status": status,
        "runStatus": status,
        "queueStatus": "none",
        "parkReason": None,
        "parkDetail": None,
        "revision": 7,
        "generation": 1,
        "currentNode": "ask",
        "waitingOn": None,
        "input": {"items": [1]},
        "output": None,
        "error": None,
        "attempts": [
            {"attemptId": "att_1", "nodeId": "ask", "visit": 1, "attemptNo": 1, "status": status}
        ],
        "effects": [
            {
                "effectId": "eff_1",
                "type": "demo-read",
                "kind": "idempotent",
                "nodeId": "log",
                "status": "applied",
            }
        ],
        "runner": None,
        "createdAt": 1_800_000_000_000,
        "updatedAt": 1_800_000_000_500,
        "finishedAt": None,
    }
    view.update(changes)
    return view


def server(statuses: list[str]) -> Callable[[int, Request], Reply]:
    """A peer that starts `run_1` and then reports the given statuses, the last one forever."""
    remaining = list(statuses)

    def answer(_index: int, request: Request) -> Reply:
        if request.operation == "run.start":
            return ok(request, {"runId": "run_1", "workflow": "demo", "revision": 1})
        if request.operation == "run.get":
            status = remaining.pop(0) if len(remaining) > 1 else remaining[0]
            return ok(request, {"run": run_view(status)})
        return refuse(request, Outcome.REJECTED, "badRequest", "unexpected")

    return answer


def test_run_start_prints_the_run_id(invoke: Invoke, home: Path) -> None:
    """Human output is the bare run id; `--json` prints `{"runId": ...}`."""
    with scripted_peer(home, server(["queued"])) as peer:
        human = invoke("run", "start", "demo", "--input", '{"items": [1]}')
        as_json = invoke("run", "start", "demo", "--json")
    assert (human.exit_code, human.stdout) == (0, "run_1\n")
    assert (as_json.exit_code, json.loads(as_json.stdout)) == (0, {"runId": "run_1"})
    recorded = {"environment": snapshot(os.environ), "workingDirectory": os.getcwd()}
    payloads = [r.payload for _, r in peer.requests]
    assert payloads == [
        {"workflow": "demo", "input": {"items": [1]}, **recorded},
        {"workflow": "demo", "input": {}, **recorded},
    ]
    assert all(r.idempotency_key for _, r in peer.requests)
    assert {r.client_id for _, r in peer.requests} == {"cli"}


def test_run_start_sends_the_current_project_only_if_it_has_workflows(
    invoke: Invoke, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--project` defaults to the current directory when it contains `.pi/workflows`."""
    plain, project = tmp_path / "plain", tmp_path / "project"
    plain.mkdir()
    (project / ".pi" / "workflows").mkdir(parents=True)
    with scripted_peer(home, server(["queued"])) as peer:
        monkeypatch.chdir(plain)
        invoke("run", "start", "demo")
        invoke("run", "start", "demo", "--project", "../project")
        monkeypatch.chdir(project)
        invoke("run", "start", "demo")
    sent = [r.payload.get("projectDir") for _, r in peer.requests]
    assert sent == [None, str(project), str(project)]
    assert all(p is None or Path(p).is_absolute() for p in sent)


def test_run_start_repeats_a_given_idempotency_key(invoke: Invoke, home: Path) -> None:
    """`--idempotency-key` is sent as given, so a repeated invocation is the same command."""
    with scripted_peer(home, server(["queued"])) as peer:
        invoke("run", "start", "demo", "--idempotency-key", "deploy-42")
        invoke("run", "start", "demo", "--idempotency-key", "deploy-42")
    assert [(r.client_id, r.idempotency_key) for _, r in peer.requests] == [
        ("cli", "deploy-42")
    ] * 2


@pytest.mark.parametrize(
    ("statuses", "exit_code"),
    [
        (["queued", "running", "completed"], 0),
        (["running", "waiting"], 0),
        (["running", "failed"], 1),
        (["timed_out"], 1),
        (["cancelled"], 1),
        (["running", "paused"], 1),
        (["ambiguous"], 1),
    ],
)
def test_run_start_wait_exits_by_the_final_status(
    invoke: Invoke, home: Path, statuses: list[str], exit_code: int
) -> None:
    """`--wait` follows the run until it settles and exits 0 only for completed or waiting."""
    with scripted_peer(home, server(statuses)) as peer:
        result = invoke("run", "start", "demo", "--wait", "--json")
    assert result.exit_code == exit_code, result.stderr
    printed = json.loads(result.stdout)
    assert printed["runId"] == "run_1"
    assert printed["run"]["status"] == statuses[-1]
    assert peer.operations.count("run.get") == len(statuses)


def test_run_start_wait_gives_up_at_its_timeout(invoke: Invoke, home: Path) -> None:
    """A run that keeps running past `--timeout` ends the wait with exit 1 and one line."""
    with scripted_peer(home, server(["running"])):
        result = invoke("run", "start", "demo", "--wait", "--timeout", "0.3")
    assert result.exit_code == 1
    assert result.stdout.startswith("run_1\n")
    assert result.stderr.startswith("pi-workflows: error: gave up waiting after 0.3 s")


def test_run_show_json_prints_the_run_view_as_received(invoke: Invoke, home: Path) -> None:
    """`run show --json` prints exactly the RunView the server sent."""
    view = run_view(
        "waiting",
        waitingOn={
            "requestId": "req_1",
            "nodeId": "ask",
            "kind": "checkpoint",
            "request": {"question": "Go?"},
        },
    )
    with scripted_peer(home, lambda _i, r: ok(r, {"run": view})) as peer:
        as_json = invoke("run", "show", "run_1", "--json")
        human = invoke("run", "show", "run_1")
        verbose = invoke("run", "show", "run_1", "--verbose")
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout) == view
    assert human.exit_code == 0
    for text in ("run_1", "waiting", "checkpoint answer at node ask", "req_1", "Go?", "eff_1"):
        assert text in human.stdout
    assert "att_1" not in human.stdout
    assert "run / queue" not in human.stdout
    assert "att_1" in verbose.stdout
    assert "run / queue" in verbose.stdout
    assert [(r.operation, r.run_id, r.idempotency_key) for _, r in peer.requests] == [
        ("run.get", "run_1", None)
    ] * 3


def test_server_text_is_never_read_as_markup(invoke: Invoke, home: Path) -> None:
    """A workflow name with rich markup is printed literally."""
    view = run_view("completed", workflow="[bold red]sneaky[/]", output={"ok": True})
    with scripted_peer(home, lambda _i, r: ok(r, {"run": view})):
        result = invoke("run", "show", "run_1")
    assert "[bold red]sneaky[/]" in result.stdout


@pytest.mark.parametrize(
    ("outcome", "code"),
    [
        (Outcome.REJECTED, "invalidTransition"),
        (Outcome.NOT_FOUND, "notFound"),
        (Outcome.CONFLICT, "conflict"),
    ],
)
def test_refused_commands_exit_1_with_the_servers_line(
    invoke: Invoke, home: Path, outcome: Outcome, code: str
) -> None:
    """A refusal prints the server's safe message as one error line and exits 1."""

    def answer(_index: int, request: Request) -> Reply:
        return refuse(request, outcome, code, "run run_1 cannot be paused now")

    with scripted_peer(home, answer):
        result = invoke("run", "pause", "run_1")
    assert result.exit_code == 1
    assert result.stderr == "pi-workflows: error: run run_1 cannot be paused now\n"


def test_run_control_commands_send_their_operations(invoke: Invoke, home: Path) -> None:
    """pause, resume, cancel (with its reason) and restart send one request each."""

    def answer(_index: int, request: Request) -> Reply:
        return ok(request, {"runId": request.run_id, "status": "x", "revision": 3}, revision=3)

    with scripted_peer(home, answer) as peer:
        results = [
            invoke("run", "pause", "run_1"),
            invoke("run", "resume", "run_1", "--json"),
            invoke("run", "cancel", "run_1", "--reason", "wrong input"),
            invoke("run", "restart", "run_1"),
        ]
    assert [r.exit_code for r in results] == [0, 0, 0, 0]
    assert results[0].stdout == "run run_1: x (revision 3)\n"
    assert json.loads(results[1].stdout) == {
        "runId": "run_1",
        "status": "x",
        "revision": 3,
        "adopted": False,
    }
    assert [(r.operation, r.payload) for _, r in peer.requests] == [
        ("run.pause", {}),
        ("run.resume", {}),
        ("run.cancel", {"reason": "wrong input"}),
        ("run.restart", {}),
    ]


def test_run_list_filters_by_status_and_limit(invoke: Invoke, home: Path) -> None:
    """Repeated `--status` options and `--limit` become the `run.list` payload."""
    summary = {k: v for k, v in run_view("paused").items() if k not in {"input", "attempts"}}
    with scripted_peer(home, lambda _i, r: ok(r, {"runs": [summary]})) as peer:
        human = invoke("run", "list", "--status", "waiting", "--status", "paused", "--limit", "5")
        as_json = invoke("run", "list", "--json")
    assert human.exit_code == 0
    assert "run_1" in human.stdout
    assert json.loads(as_json.stdout) == {"runs": [summary], "next": None}
    assert [r.payload for _, r in peer.requests] == [
        {"status": ["waiting", "paused"], "limit": 5},
        {},
    ]


def test_answers_send_the_parsed_value_and_choice(invoke: Invoke, home: Path) -> None:
    """`checkpoint answer --value` sends parsed JSON; `decision answer --choice` the id."""

    def answer(_index: int, request: Request) -> Reply:
        return ok(request, {"runId": "run_1", "requestId": "req_9", "revision": 8})

    with scripted_peer(home, answer) as peer:
        first = invoke(
            "checkpoint", "answer", "run_1", "--value", '{"answer": "yes"}', "--request-id", "req_9"
        )
        second = invoke("decision", "answer", "run_1", "--choice", "no", "--json")
        third = invoke("checkpoint", "answer", "run_1", "--value", "-", stdin='"from stdin"')
    assert (first.exit_code, second.exit_code, third.exit_code) == (0, 0, 0)
    assert "req_9" in first.stdout
    assert json.loads(second.stdout)["requestId"] == "req_9"
    assert [(r.operation, r.payload) for _, r in peer.requests] == [
        ("checkpoint.answer", {"value": {"answer": "yes"}, "requestId": "req_9"}),
        ("decision.answer", {"choice": "no"}),
        ("checkpoint.answer", {"value": "from stdin"}),
    ]
