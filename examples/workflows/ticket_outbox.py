"""A stand-in for an outside ticket system that deduplicates by idempotency key.

Imported by open-ticket.workflow.py as a sibling helper module, so it is recorded as a
mounted source: if this file changes, a paused run of that workflow refuses to resume.
"""

import json
from pathlib import Path


def create_ticket(outbox: Path, idempotency_key: str, title: str) -> dict[str, object]:
    """Create the ticket once per key; a repeated call reads back the first one."""
    outbox.mkdir(parents=True, exist_ok=True)
    path = outbox / f"{idempotency_key}.json"
    ticket = {"id": f"T-{idempotency_key[-8:]}", "title": title}
    try:
        with path.open("x", encoding="utf-8") as handle:
            json.dump(ticket, handle)
    except FileExistsError:
        return {**json.loads(path.read_text(encoding="utf-8")), "created": False}
    return {**ticket, "created": True}
