"""Reading what the real Pi reported over RPC and stored in its session, for assertions.

Owns the shapes the tests look at: the `workflow` tool's results, the extension's custom
messages and decision cards among the session's entries, and the session file on disk.
Pure functions over records and files; nothing here talks to Pi or the server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Record = dict[str, Any]

MESSAGE_TYPE = "pi-workflows"
"""The `customType` of the extension's custom messages (steps, notifications, results)."""

DECISION_ENTRY = "pi-workflows-decision"
"""The `customType` of the extension's decision cards (custom entries the model never sees)."""


def tool_results(records: list[Record]) -> list[Record]:
    """The `tool_execution_end` records of the `workflow` tool."""
    return [
        r
        for r in records
        if r.get("type") == "tool_execution_end" and r.get("toolName") == "workflow"
    ]


def tool_calls(records: list[Record]) -> list[Record]:
    """The arguments of every `workflow` tool call, in order (`tool_execution_start`)."""
    return [
        dict(r.get("args") or {})
        for r in records
        if r.get("type") == "tool_execution_start" and r.get("toolName") == "workflow"
    ]


def result_text(record: Record) -> str:
    """The text the model sees for one tool result."""
    content = record["result"]["content"]
    return "".join(part.get("text", "") for part in content if part.get("type") == "text")


def workflow_messages(entries: list[Record], kind: str | None = None) -> list[Record]:
    """The extension's custom messages among `entries` (of one `details.kind`, if given)."""
    return [
        e
        for e in entries
        if e.get("type") == "custom_message"
        and e.get("customType") == MESSAGE_TYPE
        and (kind is None or (e.get("details") or {}).get("kind") == kind)
    ]


def decision_cards(entries: list[Record]) -> list[Record]:
    """The extension's decision cards among `entries`."""
    return [
        e for e in entries if e.get("type") == "custom" and e.get("customType") == DECISION_ENTRY
    ]


def content_text(entry: Record) -> str:
    """The model-visible text of a custom message entry."""
    content = entry.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if p.get("type") == "text")


def session_file(session_dir: Path, session_id: str) -> list[Record]:
    """The entries of the one session file in `session_dir` for `session_id` (header first)."""
    files = [
        path
        for path in session_dir.rglob("*.jsonl")
        if session_id in path.read_text().splitlines()[0]
    ]
    assert len(files) == 1, f"expected one session file for {session_id}: {files}"
    return [json.loads(line) for line in files[0].read_text().splitlines() if line.strip()]
