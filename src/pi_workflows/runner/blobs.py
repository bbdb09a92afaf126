"""Reading values the server sends by reference, and the state a runner holds in memory.

Runs in the runner child; never opens the database. ``state.get`` carries values over the
inline limit (a large input, node outputs, an answer, a submission to validate) as ``ValueRef``s
(digest, size). ``fetch`` reads one in ``blob.read`` chunks, checks its size and sha256
against the reference, and decodes it; ``resolve`` turns a whole ``StateView`` into one
with every value in place, so the engine never sees a reference. A run with many node
outputs gets them in pages: ``state.get`` carries the first, and ``resolve`` asks
``state.outputs`` for the rest, checking the run's revision did not move in between.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import msgspec

from pi_workflows.engine import canonical_json
from pi_workflows.runner.channel import Channel
from pi_workflows.runner.envelope import OutputsPage, StateView, ValueRef, convert
from pi_workflows.runner.errors import ProtocolViolationError
from pi_workflows.runner.limits import BLOB_CHUNK_BYTES


def fetch(channel: Channel, ref: ValueRef) -> Any:
    """The value behind ``ref``, read in chunks and verified against its digest."""
    data = bytearray()
    while len(data) < ref.bytes:
        reply = channel.request(
            "blob.read", {"digest": ref.digest, "offset": len(data), "length": BLOB_CHUNK_BYTES}
        )
        chunk = base64.b64decode(str(reply.get("data", "")))
        if not chunk:
            raise ProtocolViolationError("blob.read", f"value {ref.digest} ended early")
        data += chunk
    if len(data) != ref.bytes or hashlib.sha256(data).hexdigest() != ref.digest:
        raise ProtocolViolationError("blob.read", f"value {ref.digest} does not match its digest")
    return json.loads(data)


def _all_pages(channel: Channel, view: StateView) -> StateView:
    """``view`` with the node outputs of every further ``state.outputs`` page added."""
    if view.more_outputs is None:
        return view
    outputs, refs = dict(view.outputs), dict(view.output_refs)
    cursor: str | None = view.more_outputs
    while cursor is not None:
        reply = channel.request("state.outputs", {"after": cursor})
        page = convert(reply, OutputsPage, "state.outputs")
        if page.revision != view.revision:
            raise ProtocolViolationError(
                "state.outputs", f"the run moved from revision {view.revision} while paging"
            )
        outputs.update(page.outputs)
        refs.update(page.output_refs)
        cursor = page.more_outputs
    return msgspec.structs.replace(view, outputs=outputs, output_refs=refs, more_outputs=None)


def resolve(channel: Channel, view: StateView) -> StateView:
    """``view`` with every page of outputs read and every value sent by reference fetched
    and put in place."""
    view = _all_pages(channel, view)
    changes: dict[str, Any] = {}
    if view.input_ref is not None:
        changes["input"], changes["input_ref"] = fetch(channel, view.input_ref), None
    if view.output_refs:
        outputs = dict(view.outputs)
        for node_id, ref in view.output_refs.items():
            outputs[node_id] = fetch(channel, ref)
        changes["outputs"], changes["output_refs"] = outputs, {}
    active = view.active
    request = None if active is None else active.request
    if active is not None and request is not None:
        if request.answer_ref is not None:
            request = msgspec.structs.replace(
                request, answer=fetch(channel, request.answer_ref), answer_ref=None
            )
        submission = request.submission
        if submission is not None and submission.value_ref is not None:
            submission = msgspec.structs.replace(
                submission, value=fetch(channel, submission.value_ref), value_ref=None
            )
            request = msgspec.structs.replace(request, submission=submission)
        if request is not active.request:
            changes["active"] = msgspec.structs.replace(active, request=request)
    return msgspec.structs.replace(view, **changes) if changes else view


def state_size(view: StateView) -> dict[str, int]:
    """Canonical JSON bytes of the input (key ``""``) and of each node's latest output, of a
    resolved view."""
    sizes = {"": len(canonical_json(view.input))}
    for node_id, output in view.outputs.items():
        sizes[node_id] = len(canonical_json(output))
    return sizes
