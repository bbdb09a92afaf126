"""Inputs larger than one frame, held in memory while their connection sends them.

Runs in the server. A client sends an input over ``INLINE_INPUT_BYTES`` with ``upload.put``
(slices of at most ``UPLOAD_CHUNK_BYTES``, in order, each answered with how many bytes the
server now holds), then names it in ``run.start`` by digest; ``take`` hands its bytes over
once and forgets them. Nothing of an upload is ever written to the state database: an upload
lives only in this server's memory and only as long as the connection that sent it, so a
client killed halfway, a dropped connection or a server crash leaves nothing behind (the
client sends it again, from the start, on its next connection). Memory is bounded: at most
``MAX_UPLOADS_PER_CONNECTION`` uploads per connection and ``MAX_HELD_BYTES`` declared bytes
in all, reserved when an upload begins.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Final

from pi_workflows.protocol import MAX_INPUT_BYTES, UPLOAD_CHUNK_BYTES, input_too_large
from pi_workflows.server.peers import Peer

__all__ = ["MAX_HELD_BYTES", "MAX_UPLOADS_PER_CONNECTION", "UploadError", "Uploads"]

MAX_HELD_BYTES: Final = 4 * MAX_INPUT_BYTES
"""Declared bytes of every upload held at once (64 MiB)."""

MAX_UPLOADS_PER_CONNECTION: Final = 4
"""Uploads one connection may hold at once (different digests)."""


class UploadError(Exception):
    """An ``upload.put`` the server refuses: ``code`` (``inputTooLarge``, ``badRequest``,
    ``uploadDamaged``, ``uploadsBusy``) and one line. The upload it names is forgotten."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class _Upload:
    size: int
    data: bytearray = field(default_factory=bytearray)
    hasher: hashlib._Hash = field(default_factory=hashlib.sha256)

    @property
    def complete(self) -> bool:
        return len(self.data) == self.size


class Uploads:
    """Every upload this server holds, by connection and digest."""

    def __init__(self, held_bytes: int = MAX_HELD_BYTES) -> None:
        self._limit = held_bytes
        self._by_peer: dict[Peer, dict[str, _Upload]] = {}
        self.reserved = 0  # declared bytes of every upload held

    @property
    def count(self) -> int:
        """Uploads held now (complete or not)."""
        return sum(len(uploads) for uploads in self._by_peer.values())

    def status(self) -> dict[str, int]:
        """``{count, bytes}``: uploads held and the bytes received for them."""
        received = sum(len(u.data) for ups in self._by_peer.values() for u in ups.values())
        return {"count": self.count, "bytes": received}

    def put(self, peer: Peer, digest: str, size: int, offset: int, data: bytes) -> int:
        """Add the slice ``data`` at ``offset`` of the upload ``digest`` of ``size`` bytes;
        the bytes held now, from the start.

        A slice that begins past what is held adds nothing (the answer says where to go on
        from: after a reconnection that is 0); one that overlaps it adds only its new part.
        The last byte checks the whole against ``digest`` (``uploadDamaged``, forgotten)."""
        if size > MAX_INPUT_BYTES:
            self._forget(peer, digest)
            raise UploadError("inputTooLarge", input_too_large(size))
        if len(data) > UPLOAD_CHUNK_BYTES:
            raise UploadError(
                "badRequest", f"an upload.put slice is at most {UPLOAD_CHUNK_BYTES} bytes"
            )
        upload = self._open(peer, digest, size)
        held = len(upload.data)
        if offset + len(data) > size:
            self._forget(peer, digest)
            raise UploadError(
                "badRequest", f"the slice at {offset} goes past the declared {size} bytes"
            )
        if offset > held or upload.complete:
            return held
        fresh = data[held - offset :]
        upload.data += fresh
        upload.hasher.update(fresh)
        if len(upload.data) == size and upload.hasher.hexdigest() != digest:
            self._forget(peer, digest)
            raise UploadError(
                "uploadDamaged",
                f"the {size} uploaded bytes do not match the digest {digest}; send them again",
            )
        return len(upload.data)

    def _open(self, peer: Peer, digest: str, size: int) -> _Upload:
        uploads = self._by_peer.get(peer)
        if uploads is None:
            uploads = self._by_peer[peer] = {}
            peer.on_close(lambda: self.drop(peer))
        upload = uploads.get(digest)
        if upload is not None:
            if upload.size != size:
                self._forget(peer, digest)
                raise UploadError("badRequest", f"the upload {digest} was begun with another size")
            return upload
        if len(uploads) >= MAX_UPLOADS_PER_CONNECTION:
            raise UploadError(
                "uploadsBusy",
                f"this connection holds {len(uploads)} uploads already; start a run with one"
                " before sending another",
            )
        if self.reserved + size > self._limit:
            raise UploadError(
                "uploadsBusy",
                f"the server holds {self.reserved} bytes of other uploads (the limit is"
                f" {self._limit}); try again when they are done",
            )
        self.reserved += size
        upload = uploads[digest] = _Upload(size)
        return upload

    def take(self, peer: Peer, digest: str) -> bytes | None:
        """The bytes of the complete upload ``digest`` of this connection, forgotten now;
        None when there is no such complete upload."""
        upload = self._by_peer.get(peer, {}).get(digest)
        if upload is None or not upload.complete:
            return None
        self._forget(peer, digest)
        return bytes(upload.data)

    def _forget(self, peer: Peer, digest: str) -> None:
        uploads = self._by_peer.get(peer)
        if uploads is not None and digest in uploads:
            self.reserved -= uploads.pop(digest).size

    def drop(self, peer: Peer) -> None:
        """The connection closed: forget everything it sent."""
        for upload in self._by_peer.pop(peer, {}).values():
            self.reserved -= upload.size
