"""The connection sender's last resort: an event it cannot encode becomes its watch's
``*.unavailable`` event, so nothing an event holds stops a connection's pushes."""

from __future__ import annotations

import json

from pi_workflows.protocol import MAX_FRAME_BYTES, Event
from pi_workflows.server.connections import _event_frame


def test_an_event_over_the_frame_limit_is_sent_as_its_watchs_unavailable_event() -> None:
    """A ``session.view`` too large to encode becomes ``session.unavailable`` for that
    session, with a one-line message that says what to do."""
    huge = Event(name="session.view", payload={"sessionId": "s", "text": "x" * MAX_FRAME_BYTES})
    frame = _event_frame("session:s", huge)
    assert frame is not None
    sent = json.loads(frame)
    assert sent["name"] == "session.unavailable"
    assert sent["payload"]["sessionId"] == "s"
    assert sent["payload"]["code"] == "viewFailed"
    assert sent["payload"]["retryAfterMs"] == 1000
    assert "watch again (session.watch)" in sent["payload"]["message"]


def test_run_and_list_keys_get_their_own_unavailable_events() -> None:
    """An event that cannot be encoded at all (not JSON) ends a run watch with
    ``run.unavailable`` and a list watch with ``runs.unavailable``."""
    broken = Event(name="run.view", payload={"value": object()})
    run = json.loads(_event_frame("run:run_1", broken) or b"{}")
    assert (run["name"], run["runId"], run["payload"]["runId"]) == (
        "run.unavailable",
        "run_1",
        "run_1",
    )
    listed = json.loads(
        _event_frame("runs", Event(name="runs.view", payload={"x": object()})) or b"{}"
    )
    assert listed["name"] == "runs.unavailable"
    assert _event_frame("unknown", broken) is None


def test_an_event_that_fits_is_sent_as_it_is() -> None:
    """A normal event is encoded as one frame ending in a newline."""
    event = Event(name="runs.view", payload={"runs": [], "counts": {}})
    frame = _event_frame("runs", event)
    assert frame is not None
    assert frame.endswith(b"\n")
    assert json.loads(frame)["payload"] == {"runs": [], "counts": {}}
