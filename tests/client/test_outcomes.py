"""Every wire outcome maps to a receipt or to one typed error with the server's code."""

from __future__ import annotations

from pathlib import Path

import pytest

from client.scripted_peer import Reply, ok, refuse, serving
from pi_workflows.client import (
    ClaimLostError,
    ClientError,
    CommandError,
    ConflictError,
    InvalidPayloadError,
    NotFoundError,
    RejectedError,
    UnavailableError,
)
from pi_workflows.protocol import Outcome, Request, Response


@pytest.mark.parametrize(
    ("outcome", "error_type"),
    [
        (Outcome.REJECTED, RejectedError),
        (Outcome.CONFLICT, ConflictError),
        (Outcome.NOT_FOUND, NotFoundError),
        (Outcome.UNAVAILABLE, UnavailableError),
        (Outcome.CLAIM_LOST, ClaimLostError),
    ],
)
def test_each_refusal_outcome_raises_its_own_error(
    tmp_path: Path, outcome: Outcome, error_type: type[CommandError]
) -> None:
    """A refusal raises the matching `CommandError` with code, message, operation and run id."""

    def answer(_index: int, request: Request) -> Reply:
        return refuse(request, outcome, "invalidTransition", "run r is completed")

    with (
        serving(tmp_path, answer) as (client, peer),
        pytest.raises(error_type) as caught,
    ):
        client.pause("r")
    error = caught.value
    assert isinstance(error, ClientError)
    assert (error.code, error.message, error.operation, error.run_id) == (
        "invalidTransition",
        "run r is completed",
        "run.pause",
        "r",
    )
    assert error.outcome is outcome
    assert len(peer.requests) == 1, "a refusal is an answer, never retried"


def test_a_refusal_without_an_error_object_still_has_a_code_and_a_message(
    tmp_path: Path,
) -> None:
    """A bare `notFound` response becomes `NotFoundError` with the outcome as its code."""

    def answer(_index: int, request: Request) -> Reply:
        return Reply(Response(request_id=request.request_id, outcome=Outcome.NOT_FOUND))

    with (
        serving(tmp_path, answer) as (client, _peer),
        pytest.raises(NotFoundError) as caught,
    ):
        client.get_run("nope")
    assert caught.value.code == "notFound"
    assert "run.get" in caught.value.message


@pytest.mark.parametrize("outcome", [Outcome.ACCEPTED, Outcome.ADOPTED])
def test_accepted_and_adopted_return_the_receipt(tmp_path: Path, outcome: Outcome) -> None:
    """Both ok outcomes return a `Receipt`; only adopted says so in `adopted`."""

    def answer(_index: int, request: Request) -> Reply:
        body = {"runId": "r", "requestId": "req_1", "revision": 4}
        return ok(request, body, outcome=outcome, revision=4)

    with serving(tmp_path, answer) as (client, peer):
        receipt = client.answer_checkpoint("r", {"answer": "yes"}, request_id="req_1")
    assert receipt.outcome is outcome
    assert receipt.adopted is (outcome is Outcome.ADOPTED)
    assert receipt.body == {"runId": "r", "requestId": "req_1", "revision": 4}
    assert receipt.revision == 4
    ((_, request),) = peer.requests
    assert request.payload == {"value": {"answer": "yes"}, "requestId": "req_1"}


def test_operation_payloads_follow_the_protocol_table(tmp_path: Path) -> None:
    """Each method sends its operation with the payload and run id docs/protocol.md gives."""
    with serving(tmp_path, lambda _i, r: ok(r)) as (client, peer):
        client.list_workflows(tmp_path / "proj")
        client.answer_decision("r", "yes")
        client.cancel("r")
        client.diagnose()
        client.repair()
        client.backup("backup.sqlite")
        client.call("run.get", run_id="r", expected_revision=3)
    sent = [(r.operation, r.run_id, r.payload) for _, r in peer.requests]
    assert sent == [
        ("workflows.list", None, {"projectDir": str(tmp_path / "proj")}),
        ("decision.answer", "r", {"choice": "yes"}),
        ("run.cancel", "r", {}),
        ("state.diagnose", None, {}),
        ("state.repair", None, {}),
        ("state.backup", None, {"path": str(Path.cwd() / "backup.sqlite")}),
        ("run.get", "r", {}),
    ]
    assert peer.requests[-1][1].expected_revision == 3


def test_a_payload_that_is_not_plain_json_is_refused_before_sending(tmp_path: Path) -> None:
    """A tuple or NaN in the input raises `InvalidPayloadError` naming the path."""
    with (
        serving(tmp_path, lambda _i, r: ok(r)) as (client, peer),
        pytest.raises(InvalidPayloadError, match=r"\$\.input\.items"),
    ):
        client.start_run("demo", {"items": (1, 2)})
    assert peer.requests == []
