"""Reusing a workflow's description while its sources are byte-for-byte unchanged.

Runs in the server, which never loads workflow code: describing a workflow takes a resolver
child that imports it. A repeated ``run.start`` of an unchanged workflow does not need one.
The cache keeps the last description per (spec, project directory) with the resolver's
hints: the files a new resolve would look at in order (the first existing one wins) and the
root file. An entry is reused only while that first existing candidate is still the root
and the sha256 of the root and of every mounted module still equal the description's (the
same bytes the runner verifies before it runs anything). Otherwise it is dropped and the
resolver runs again. Reading and hashing a few small files is the whole cost.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

MAX_ENTRIES = 256


@dataclass(frozen=True)
class _Entry:
    reply: dict[str, Any]
    candidates: tuple[str, ...]
    root: str
    hashes: tuple[tuple[str, str], ...]  # (path, sha256): the root and every mounted module


def _real(project: str | None) -> str | None:
    """The project directory with every symlink resolved now: a link pointed elsewhere is
    another project, so another entry."""
    return None if project is None else os.path.realpath(project)


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


class DescriptionCache:
    """Resolver replies by (spec, project directory), valid while their sources are."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[str, str | None], _Entry] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, spec: str, project: str | None) -> dict[str, Any] | None:
        """The cached reply if every check still holds, else None (and the entry goes)."""
        key = (spec, _real(project))
        entry = self._entries.get(key)
        if entry is not None and self._valid(entry):
            self._entries.move_to_end(key)
            self.hits += 1
            return entry.reply
        self._entries.pop(key, None)
        self.misses += 1
        return None

    def put(self, spec: str, project: str | None, reply: dict[str, Any]) -> None:
        """Remember a successful resolver reply that carries its cache hints."""
        hints = reply.get("cacheHints")
        source = reply.get("source")
        if not isinstance(hints, dict) or not isinstance(source, dict):
            return
        root, candidates = hints.get("root"), hints.get("candidates")
        if not isinstance(root, str) or not isinstance(candidates, list):
            return
        hashes = [(root, str(source.get("revision")))]
        hashes += [(str(p), str(h)) for p, h in dict(source.get("mounted") or {}).items()]
        key = (spec, _real(project))
        self._entries[key] = _Entry(reply, tuple(str(c) for c in candidates), root, tuple(hashes))
        self._entries.move_to_end(key)
        while len(self._entries) > MAX_ENTRIES:
            self._entries.popitem(last=False)

    def _valid(self, entry: _Entry) -> bool:
        first = next((c for c in entry.candidates if os.path.isfile(c)), None)
        if first != entry.root:
            return False
        return all(_sha256(path) == digest for path, digest in entry.hashes)
