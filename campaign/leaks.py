"""The secrets check: claim tokens never leave the server's memory, and their hashes appear
nowhere but `leases.token_hash`.

Runs in the campaign driver. Every artifact the campaign sees (CLI output and error lines,
client replies, the server log, every TEXT and BLOB value of every table) is fed to a
`LeakScanner`, which keeps only digests: the sha256 of every 43-character url-safe window (a
token is `secrets.token_urlsafe(32)`) and every 64-hex-digit window. At the end those are
compared with every token hash the campaign saw in `leases` during the seed: a match is a
token, or a token hash, outside the one column allowed to hold it.

A seed may also name literal secrets it knows (`secret`: a Telegram seat's bot token),
which must appear in nothing it is fed (`secret_findings`).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path
from typing import Final

TOKEN_CHARS: Final = 43
HASH_CHARS: Final = 64
_URLSAFE: Final = re.compile(rb"[A-Za-z0-9_-]{43,}")
_HEX: Final = re.compile(rb"[0-9a-fA-F]{64,}")


class LeakScanner:
    """Digests of everything token-shaped or hash-shaped the campaign has seen."""

    def __init__(self) -> None:
        self._token_digests: dict[str, str] = {}  # sha256(window) -> where it was seen
        self._hashes: dict[str, str] = {}  # lower-case hex window -> where it was seen
        self._secrets: dict[str, bytes] = {}  # name -> a literal secret
        self._secrets_seen: dict[str, list[str]] = {}  # name -> where it was seen
        self.fed = 0

    def secret(self, name: str, value: str) -> None:
        """Watch for a literal secret (for example a bot token) in everything fed."""
        self._secrets[name] = value.encode()

    def feed(self, where: str, data: str | bytes | None) -> None:
        """Scan one artifact; `where` names it in a finding."""
        if not data:
            return
        raw = data.encode("utf-8", "replace") if isinstance(data, str) else data
        self.fed += len(raw)
        for name, secret in self._secrets.items():
            if secret in raw:
                self._secrets_seen.setdefault(name, []).append(where)
        for match in _URLSAFE.finditer(raw):
            run = match.group()
            for start in range(len(run) - TOKEN_CHARS + 1):
                digest = hashlib.sha256(run[start : start + TOKEN_CHARS]).hexdigest()
                self._token_digests.setdefault(digest, where)
        for match in _HEX.finditer(raw):
            run = match.group().lower()
            for start in range(len(run) - HASH_CHARS + 1):
                self._hashes.setdefault(run[start : start + HASH_CHARS].decode(), where)

    def feed_database(self, path: Path) -> None:
        """Scan every TEXT and BLOB value of every table, except `leases.token_hash`."""
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                    " AND name NOT LIKE 'sqlite_%'"
                )
            ]
            for table in tables:
                columns = [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]
                for column in columns:
                    if (table, column) == ("leases", "token_hash"):
                        continue
                    query = (
                        f'SELECT "{column}" FROM "{table}"'
                        f" WHERE typeof(\"{column}\") IN ('text', 'blob')"
                    )
                    for (value,) in conn.execute(query):
                        self.feed(f"state.sqlite {table}.{column}", value)
        finally:
            conn.close()

    def findings(self, token_hashes: set[str]) -> list[str]:
        """Where a token or a token hash was seen (empty when nothing leaked)."""
        found = []
        for token_hash in sorted(token_hashes):
            if token_hash in self._token_digests:
                found.append(f"a claim token appears in {self._token_digests[token_hash]}")
            if token_hash in self._hashes:
                found.append(f"a claim token hash appears in {self._hashes[token_hash]}")
        return found

    def secret_findings(self) -> list[str]:
        """Where a literal secret was seen (empty when none leaked)."""
        found = []
        for name, places in sorted(self._secrets_seen.items()):
            shown = ", ".join(sorted(set(places))[:5])
            found.append(f"{name} appears in {shown}")
        return found


def token_hashes(path: Path) -> set[str]:
    """The token hashes in `leases` now (read-only; the campaign samples them as it goes)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2)
    except sqlite3.Error:
        return set()
    try:
        return {str(row[0]).lower() for row in conn.execute("SELECT token_hash FROM leases")}
    except sqlite3.Error:
        return set()
    finally:
        conn.close()
