"""``upload.put``: a large input, sent slice by slice before the ``run.start`` that names it.

Runs in the server. The slices are held in memory for the connection that sends them
(``server/uploads.py``); nothing is stored in the state database until ``run.start`` commits
the run with its input, so an upload that is abandoned halfway leaves no row behind. An
upload changes no durable state, so it needs no idempotency key and stores no receipt: a
slice sent again is answered with what the server holds.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Final

import msgspec

from pi_workflows.protocol import MAX_INPUT_BYTES, Outcome, Request, input_too_large
from pi_workflows.server.context import ServerContext
from pi_workflows.server.errors import RequestError
from pi_workflows.server.handlers.registry import bad, operation, text
from pi_workflows.server.peers import Peer, current_peer
from pi_workflows.server.uploads import UploadError

DIGEST: Final = re.compile(r"[0-9a-f]{64}")


def _peer() -> Peer:
    peer = current_peer.get()
    if peer is None:
        raise bad("uploads need a client connection")
    return peer


def _count(payload: dict[str, Any], name: str, limit: int) -> int:
    value = payload.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        raise bad(f"payload field {name!r} must be an integer from 0 to {limit}")
    return value


def _digest(value: object, field: str) -> str:
    if not isinstance(value, str) or not DIGEST.fullmatch(value):
        raise bad(f"payload field {field!r} must be a sha256 digest (64 lowercase hex digits)")
    return value


def _refused(exc: UploadError) -> RequestError:
    outcome = Outcome.UNAVAILABLE if exc.code == "uploadsBusy" else Outcome.REJECTED
    return RequestError(outcome.value, exc.code, str(exc))


@operation("upload.put")
async def upload_put(server: ServerContext, request: Request) -> dict[str, Any]:
    """``{digest, bytes, offset, data}``: hold the base64 slice ``data`` at ``offset`` of the
    upload of ``bytes`` bytes whose sha256 is ``digest``; answer ``{digest, bytes, received,
    complete}`` (``received``: the bytes held from the start, where the next slice begins)."""
    payload = request.payload
    digest = _digest(payload.get("digest"), "digest")
    size = payload.get("bytes")
    if isinstance(size, int) and not isinstance(size, bool) and size > MAX_INPUT_BYTES:
        raise RequestError(Outcome.REJECTED.value, "inputTooLarge", input_too_large(size))
    size = _count(payload, "bytes", MAX_INPUT_BYTES)
    offset = _count(payload, "offset", MAX_INPUT_BYTES)
    encoded = text(payload, "data", limit=MAX_INPUT_BYTES)
    assert encoded is not None
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise bad("payload field 'data' must be base64") from None
    try:
        received = server.uploads.put(_peer(), digest, size, offset, data)
    except UploadError as exc:
        raise _refused(exc) from None
    return {"digest": digest, "bytes": size, "received": received, "complete": received == size}


def uploaded_input(server: ServerContext, ref: object) -> Any:
    """The input ``run.start`` names by ``inputRef`` (``{digest, bytes}``), decoded; the
    upload is forgotten. ``inputNotUploaded`` when this connection holds no such complete
    upload (it was never sent, or its connection closed since: send it again)."""
    if not isinstance(ref, dict):
        raise bad("payload field 'inputRef' must be {digest, bytes}")
    digest = _digest(ref.get("digest"), "inputRef.digest")
    size = ref.get("bytes")
    if isinstance(size, int) and not isinstance(size, bool) and size > MAX_INPUT_BYTES:
        raise RequestError(Outcome.REJECTED.value, "inputTooLarge", input_too_large(size))
    data = server.uploads.take(_peer(), digest)
    if data is None or len(data) != size:
        raise RequestError(
            Outcome.REJECTED.value,
            "inputNotUploaded",
            f"no complete upload {digest} on this connection: send the input with upload.put"
            " first (an upload lasts as long as the connection that sent it)",
        )
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise RequestError(
            Outcome.REJECTED.value, "inputInvalid", f"the uploaded input is not JSON: {exc}"
        ) from None
