"""The campaign's secrets check is not blind: planted tokens and hashes are found."""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from pathlib import Path

from campaign.leaks import LeakScanner


def _token() -> tuple[str, str]:
    token = secrets.token_urlsafe(32)
    return token, hashlib.sha256(token.encode()).hexdigest()


def test_a_token_in_an_artifact_is_found_by_its_hash() -> None:
    """A claim token anywhere in a text (even inside a longer url-safe run) is reported."""
    token, digest = _token()
    scanner = LeakScanner()
    scanner.feed("a log", f"renewed claim for run_1 with xx{token}yy at 12:00")
    scanner.feed("a reply", '{"runId": "run_1", "status": "running"}')
    assert scanner.findings({digest}) == ["a claim token appears in a log"]


def test_a_token_hash_outside_leases_is_found_and_leases_itself_is_allowed(
    tmp_path: Path,
) -> None:
    """The hash in `leases.token_hash` is allowed; the same hash in an event is a leak."""
    _, digest = _token()
    path = tmp_path / "state.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE leases (run_id TEXT, token_hash TEXT)")
        conn.execute("CREATE TABLE events (run_id TEXT, data_json TEXT)")
        conn.execute("INSERT INTO leases VALUES ('run_1', ?)", (digest,))
    clean = LeakScanner()
    clean.feed_database(path)
    assert clean.findings({digest}) == []
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO events VALUES ('run_1', ?)", (f'{{"hash": "{digest}"}}',))
    leaky = LeakScanner()
    leaky.feed_database(path)
    assert leaky.findings({digest}) == [
        "a claim token hash appears in state.sqlite events.data_json"
    ]
