"""Reading the witnesses effect bodies leave outside the database (see `workflows.py`).

Runs in the campaign driver. `Witnesses` follows `<witness dir>/witness.jsonl` as it grows
and answers what the operator and the oracle ask: which bodies of an effect key started,
which applied, which are in which window now, and whether a body still holds a key's lock.
It never writes the log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Body:
    """One execution of an effect body, as its witness lines describe it."""

    nonce: str
    form: str  # "action" (inside the runner) or "shell" (a command of the runner)
    kind: str  # "manual" or "idempotent"
    key: str
    run: str
    node: str
    visit: int
    pid: int
    events: list[str] = field(default_factory=list)
    result: Any = None
    overlapped: bool = False
    started_at: float | None = None  # wall-clock seconds of its `start` witness

    @property
    def applied(self) -> bool:
        """It applied its effect (an idempotent body that found the key applied did not)."""
        return "applied" in self.events

    @property
    def done(self) -> bool:
        """It returned normally."""
        return "done" in self.events

    @property
    def window(self) -> str:
        """Where it is: `beforeApply`, `afterApply` or `done`."""
        if self.done:
            return "done"
        if self.applied or "dedup" in self.events:
            return "afterApply"
        return "beforeApply"


class Witnesses:
    """The witness log of one seed, read incrementally."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "witness.jsonl"
        self._offset = 0
        self._partial = b""
        self.bodies: dict[str, Body] = {}
        self.order: list[str] = []  # nonces in the order they started
        self.lines = 0
        self.self_kills: list[dict[str, Any]] = []  # a body that killed its own runner

    def refresh(self) -> None:
        """Read whatever was appended since the last call."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return
        self._offset += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        for line in complete:
            if line.strip():
                self._add(json.loads(line))

    def _add(self, record: dict[str, Any]) -> None:
        self.lines += 1
        if record.get("e") == "selfKill":
            self.self_kills.append(record)
            return
        nonce = str(record["nonce"])
        body = self.bodies.get(nonce)
        if body is None:
            body = Body(
                nonce=nonce,
                form=str(record["form"]),
                kind=str(record["kind"]),
                key=str(record["key"]),
                run=str(record["run"]),
                node=str(record["node"]),
                visit=int(record["visit"]),
                pid=int(record["pid"]),
            )
            self.bodies[nonce] = body
            self.order.append(nonce)
        event = str(record["e"])
        if event == "overlap":
            body.overlapped = True
        else:
            body.events.append(event)
        if event == "applied":
            body.result = record.get("result")
        if event == "start" and body.started_at is None:
            body.started_at = float(record.get("t") or 0.0)

    def for_key(self, key: str) -> list[Body]:
        """Every body of one effect key, in start order."""
        return [self.bodies[n] for n in self.order if self.bodies[n].key == key]

    def unfinished(self) -> list[Body]:
        """Bodies that started and have not returned (they may be dead)."""
        return [self.bodies[n] for n in self.order if not self.bodies[n].done]

    def lock_holders(self, key: str) -> list[int]:
        """The pids of live processes holding the key's lock right now.

        Read from `/proc/locks`, so asking never takes the lock (a body starting at that
        moment must not see a false overlap).
        """
        path = self.directory / "locks" / f"{key}.lock"
        try:
            inode = path.stat().st_ino
            table = Path("/proc/locks").read_text()
        except OSError:
            return []
        holders = []
        for line in table.splitlines():
            parts = line.split()
            # "1: FLOCK  ADVISORY  WRITE 7252 fe:00:2146411 0 EOF" (a "->" marks a waiter)
            if (
                len(parts) >= 6
                and parts[1] == "FLOCK"
                and parts[5].rsplit(":", 1)[-1] == str(inode)
            ):
                holders.append(int(parts[4]))
        return holders
