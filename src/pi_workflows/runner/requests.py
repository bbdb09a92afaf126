"""The server calls a node callback makes through its context: ``ctx.publish`` (and
``ctx.signal``, ``store/``-managed as an effect).

Runs in the runner child; never opens the database. A callback runs on a worker thread and
only the main thread uses the channel, so each call is posted to the callback's inbox
(``callbacks.Request``), sent by the main thread while it waits for the callback, and its
answer handed back; the callback's thread blocks until then (or until the node is
cancelled). A call from a thread the callback started itself has no inbox and is refused:
the runner could not tell which attempt made it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from pi_workflows.authoring import CancellationSignal, ChildRun, JsonValue, NodeCancelledError
from pi_workflows.engine import canonical_json, check_json
from pi_workflows.runner.callbacks import Request, current_inbox
from pi_workflows.runner.channel import Channel
from pi_workflows.runner.errors import UnexpectedReplyError

PUBLISH_KEY_PATTERN: Final = r"\A[A-Za-z][A-Za-z0-9_.:/-]{0,127}\Z"
"""A published key (the server's ``store.published.KEY_PATTERN``, checked here first)."""

MAX_PUBLISH_BYTES: Final = 64 * 1024
"""Largest canonical JSON of one published value (the server's ``MAX_VALUE_BYTES``)."""

_KEY = re.compile(PUBLISH_KEY_PATTERN)
_POLL_SECONDS = 0.2  # how often a waiting callback looks at its cancellation


def call(
    what: str,
    send: Callable[[], dict[str, Any]],
    cancel: CancellationSignal,
    *,
    refusals: frozenset[str] = frozenset({"rejected"}),
) -> dict[str, Any]:
    """Have the main thread make ``send`` for the callback running in this thread; its
    reply payload. ``what`` names the call in errors (``"ctx.publish"``).

    Raises ``RuntimeError`` outside a node callback's own thread, ``ValueError`` with the
    server's line when it refused the call, ``NodeCancelledError`` when the node was
    cancelled first or the runner is stopping (its claim lost, its channel closed)."""
    inbox = current_inbox()
    if inbox is None:
        raise RuntimeError(
            f"{what} works only in the node's callback itself, not in a thread it started"
        )
    request = Request(send, refusals)
    inbox.post_request(request)
    while not request.done.wait(_POLL_SECONDS):
        if cancel.is_set():
            raise NodeCancelledError(f"the node was cancelled before {what} was answered")
    error = request.error
    if isinstance(error, UnexpectedReplyError) and error.outcome in refusals:
        raise ValueError(error.message or f"{what} was refused")
    if error is not None:
        raise NodeCancelledError(f"the runner is stopping: {what} was not answered")
    assert request.result is not None
    return request.result


def publisher(
    channel: Channel, attempt_id: str, cancel: CancellationSignal
) -> Callable[[str, JsonValue], None]:
    """``ctx.publish`` of the attempt ``attempt_id``: checks the key and value here, then
    waits for the server to keep them (``value.publish``, fenced by the runner's claim)."""

    def publish(key: str, value: JsonValue) -> None:
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(
                f"ctx.publish key {str(key)[:80]!r} is malformed: use 1-128 letters, digits"
                " and _.:/- starting with a letter"
            )
        check_json(value, f"the value published as {key!r}")
        size = len(canonical_json(value))
        if size > MAX_PUBLISH_BYTES:
            raise ValueError(
                f"the value published as {key!r} is {size} bytes of JSON; the limit is"
                f" {MAX_PUBLISH_BYTES}"
            )
        payload = {"attemptId": attempt_id, "key": key, "value": value}
        call("ctx.publish", lambda: channel.request("value.publish", payload), cancel)

    return publish


_EVENT = re.compile(r"\A[A-Za-z][A-Za-z0-9_.:-]{0,127}\Z")  # protocol.SIGNAL_NAME_PATTERN
MAX_SIGNAL_BYTES: Final = 256 * 1024
"""Largest canonical JSON of a sent event's data (the server's bound)."""
MAX_SIGNAL_KEY_CHARS: Final = 200
CHILDREN_PAGE: Final = 500


def signaller(
    channel: Channel, attempt_id: str, cancel: CancellationSignal
) -> Callable[..., dict[str, JsonValue]]:
    """``ctx.signal`` of the attempt ``attempt_id``: checks here, then waits for the server
    to send the event as a managed effect of the visit (``signal.send``)."""

    def signal(
        run_id: str, name: str, data: JsonValue = None, *, key: str | None = None
    ) -> dict[str, JsonValue]:
        if not isinstance(run_id, str) or not 1 <= len(run_id) <= MAX_SIGNAL_KEY_CHARS:
            raise ValueError("ctx.signal needs the target's run id (a string)")
        if not isinstance(name, str) or not _EVENT.match(name):
            raise ValueError(
                f"ctx.signal event name {str(name)[:80]!r} is malformed: use 1-128 letters,"
                " digits and _.:- starting with a letter"
            )
        chosen = f"{run_id}:{name}" if key is None else key
        if not isinstance(chosen, str) or not 1 <= len(chosen) <= MAX_SIGNAL_KEY_CHARS:
            raise ValueError(f"ctx.signal key is 1-{MAX_SIGNAL_KEY_CHARS} characters")
        check_json(data, f"the data of event {name!r}")
        size = len(canonical_json(data))
        if size > MAX_SIGNAL_BYTES:
            raise ValueError(
                f"the data of event {name!r} is {size} bytes of JSON; the limit is"
                f" {MAX_SIGNAL_BYTES}"
            )
        payload = {
            "attemptId": attempt_id, "runId": run_id, "name": name, "data": data, "key": chosen,
        }  # fmt: skip
        reply = call(
            "ctx.signal",
            lambda: channel.request("signal.send", payload),
            cancel,
            refusals=frozenset({"rejected", "conflict"}),
        )
        if reply.get("status") != "applied":
            raise ValueError(str(reply.get("error") or f"run {run_id} took no event {name!r}"))
        return {
            "runId": run_id,
            "signalId": reply.get("signalId"),
            "seq": reply.get("seq"),
            "adopted": bool(reply.get("adopted")),
        }

    return signal


def children_lister(
    channel: Channel, cancel: CancellationSignal, send: Callable[..., dict[str, JsonValue]]
) -> Callable[[str], list[ChildRun]]:
    """``ctx.children``: the child runs of a node's latest join, read from the server."""

    def children(node_id: str) -> list[ChildRun]:
        if not isinstance(node_id, str) or not node_id:
            raise ValueError("ctx.children needs a node id")
        found: list[ChildRun] = []
        after = 0
        while True:
            page = call(
                "ctx.children",
                lambda after=after: channel.request(  # type: ignore[misc]
                    "children.of", {"nodeId": node_id, "after": after, "limit": CHILDREN_PAGE}
                ),
                cancel,
            )
            for item in page.get("items") or []:
                found.append(
                    ChildRun(
                        run_id=item.get("runId"),
                        item=int(item["item"]),
                        status=str(item.get("status")),
                        _send=send,
                    )
                )
            if page.get("next") is None:
                return found
            after = int(page["next"])

    return children
