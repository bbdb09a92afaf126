"""How times travel in outputs and views: epoch milliseconds as ISO-8601 UTC text.

Shared by the server (wait and event views) and the runner (a sleep node's output), so both
spell a time the same way. Pure: no clock is read here.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with milliseconds: ``2026-12-04T09:30:00.000Z``."""
    moment = datetime.fromtimestamp(ms // 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
