"""Client methods for interactive requests and origin sessions (mixed into `Client`).

Submissions are validated by a runner the server supervises; `submit` holds on until the
outcome is durable, asking again with the same idempotency key while the server answers
`validating`. A rejected submission raises `RejectedError` with code `validationRejected`
and the validation message. `SessionWatch` is one connection that receives the
server-pushed views of one session (what the Pi extension does, for programs and tests).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from pi_workflows.client.connection import Connection
from pi_workflows.protocol import CLIENT_SCHEMA, Request

if TYPE_CHECKING:
    from pi_workflows.client.sync_client import JsonObject, Receipt

SUBMIT_POLL_SECONDS: Final = 0.2
"""Pause between asking again for a submission that is still validating."""


class InteractionMethods:
    """`interaction.*`, `session.*` and report operations; needs `call` and a socket."""

    if TYPE_CHECKING:
        call: Callable[..., Receipt]
        timeout: float
        start_timeout: float

        @property
        def socket_path(self) -> Path: ...

        @property
        def client_id(self) -> str: ...

    def submit(
        self,
        request_id: str,
        output: Any,
        *,
        run_id: str | None = None,
        idempotency_key: str | None = None,
        wait: float | None = 120.0,
    ) -> Receipt:
        """`interaction.submit`: hand in an agent, assistant-message or checkpoint answer.

        Returns the receipt once the submission is `accepted` (or, after `wait` seconds,
        still `validating`: ask again with the same key). Raises `RejectedError` (code
        `validationRejected`, the message is the validation's) when it was rejected.
        """
        key = idempotency_key or f"submit-{uuid.uuid4()}"
        payload: JsonObject = {"requestId": request_id, "output": output}
        until = None if wait is None else time.monotonic() + wait
        while True:
            receipt = self.call("interaction.submit", payload, run_id=run_id, idempotency_key=key)
            if receipt.get("status") != "validating" or (
                until is not None and time.monotonic() >= until
            ):
                return receipt
            time.sleep(SUBMIT_POLL_SECONDS)

    def update(self, request_id: str, body: Any, *, idempotency_key: str | None = None) -> Receipt:
        """`interaction.update`: record progress on an open step (an event of its run)."""
        payload: JsonObject = {"requestId": request_id, "body": body}
        return self.call("interaction.update", payload, idempotency_key=idempotency_key)

    def list_interactions(self, session_id: str | None = None) -> list[JsonObject]:
        """`interaction.list`: open requests, oldest first (of one origin session)."""
        payload: JsonObject = {} if session_id is None else {"sessionId": session_id}
        return list(self.call("interaction.list", payload).body.get("interactions", []))

    def attach_session(self, session_id: str, *, idempotency_key: str | None = None) -> int:
        """`session.attach`: become the session's coordinator; returns the epoch."""
        receipt = self.call(
            "session.attach", {"sessionId": session_id}, idempotency_key=idempotency_key
        )
        return int(receipt["coordinatorEpoch"])

    def get_session(self, session_id: str) -> JsonObject:
        """`session.get`: the session's view (active request, messages, runs)."""
        return dict(self.call("session.get", {"sessionId": session_id}).body.get("session", {}))

    def report_messages(
        self,
        session_id: str,
        epoch: int,
        present: dict[str, str],
        *,
        idle: bool = False,
    ) -> JsonObject:
        """`workflowMessage.report`: `present` maps workflow message ids to session entry ids."""
        payload: JsonObject = {
            "sessionId": session_id,
            "coordinatorEpoch": epoch,
            "present": [{"workflowMessageId": m, "entryId": e} for m, e in present.items()],
            "idle": idle,
        }
        return dict(self.call("workflowMessage.report", payload, idempotency_key=None).body)

    def report_turn(
        self,
        session_id: str,
        epoch: int,
        event: str,
        *,
        stop_reason: str | None = None,
        workflow_message_id: str | None = None,
    ) -> JsonObject:
        """`workflowTurn.report`: a model turn `started` or `ended` (with its stop reason)."""
        payload: JsonObject = {"sessionId": session_id, "coordinatorEpoch": epoch, "event": event}
        if stop_reason is not None:
            payload["stopReason"] = stop_reason
        if workflow_message_id is not None:
            payload["workflowMessageId"] = workflow_message_id
        return dict(self.call("workflowTurn.report", payload, idempotency_key=None).body)

    def watch_session(self, session_id: str, epoch: int) -> SessionWatch:
        """`session.watch` on a connection of its own; read views from the returned watch."""
        return SessionWatch(
            Connection.open(self.socket_path, timeout=self.start_timeout),
            self.client_id,
            session_id,
            epoch,
            self.timeout,
        )


class SessionWatch:
    """One connection that receives the server-pushed views of one session."""

    def __init__(
        self, connection: Connection, client_id: str, session_id: str, epoch: int, timeout: float
    ) -> None:
        self._connection = connection
        self.session_id = session_id
        request = Request(
            schema=CLIENT_SCHEMA,
            request_id=f"req-{uuid.uuid4().hex}",
            client_id=client_id,
            operation="session.watch",
            payload={"sessionId": session_id, "coordinatorEpoch": epoch},
        )
        response = connection.exchange(request, timeout=timeout)
        if not response.ok:
            connection.close()
            message = response.error.message if response.error else str(response.outcome)
            raise ValueError(f"session.watch was refused: {message}")
        self.fenced = False
        self.view: JsonObject | None = None

    def next_view(self, timeout: float) -> JsonObject | None:
        """The next view pushed within `timeout` seconds (None if none came). A
        `session.fenced` event marks the watch fenced and returns None."""
        event = self._connection.next_event(timeout)
        if event is None:
            return None
        if event.name == "session.fenced":
            self.fenced = True
            return None
        self.view = dict(event.payload)
        return self.view

    def wait_for(self, predicate: Callable[[JsonObject], bool], timeout: float) -> JsonObject:
        """The first pushed view (or the current one) that satisfies `predicate`."""
        until = time.monotonic() + timeout
        if self.view is not None and predicate(self.view):
            return self.view
        while True:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no view of session {self.session_id} matched in {timeout} s")
            view = self.next_view(left)
            if view is not None and predicate(view):
                return view

    def close(self) -> None:
        """Close the watch connection."""
        self._connection.close()

    def __enter__(self) -> SessionWatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
