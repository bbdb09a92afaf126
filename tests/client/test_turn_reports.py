"""What `report_turn` sends: the fields of `workflowTurn.report`, from both clients."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from client.scripted_peer import ok, serving
from pi_workflows.client import AsyncClient

pytestmark = pytest.mark.timeout(30)


def test_a_turn_ended_with_an_error_carries_the_providers_text(tmp_path: Path) -> None:
    """`error_message` reaches the server as `errorMessage`; without it the field is absent."""
    with serving(tmp_path, lambda _i, r: ok(r, {"turnId": "turn_1", "paused": None})) as (
        client,
        peer,
    ):
        client.report_turn("s1", 3, "ended", stop_reason="error", error_message="HTTP 500: down")
        client.report_turn("s1", 3, "started", workflow_message_id="wm_1")
    payloads = [request.payload for _, request in peer.requests]
    assert payloads == [
        {
            "sessionId": "s1",
            "coordinatorEpoch": 3,
            "event": "ended",
            "stopReason": "error",
            "errorMessage": "HTTP 500: down",
        },
        {"sessionId": "s1", "coordinatorEpoch": 3, "event": "started", "workflowMessageId": "wm_1"},
    ]


def test_the_async_client_sends_the_same_fields(tmp_path: Path) -> None:
    async def report() -> None:
        async with AsyncClient(tmp_path, autostart=False, timeout=5) as client:
            await client.report_turn("s1", 1, "ended", stop_reason="error", error_message="quota")

    with serving(tmp_path, lambda _i, r: ok(r, {"turnId": None, "paused": None})) as (_, peer):
        asyncio.run(report())
    [(_, request)] = [item for item in peer.requests if item[1].operation == "workflowTurn.report"]
    assert request.payload["errorMessage"] == "quota"
