"""The words for an ambiguous effect's evidence: what its runner wrote about the body's
outcome before a report that never reached a server (`server/evidence.py`), as `run show`
and `effect show` print it. Pure text; runs in the CLI process."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from pi_workflows.cli.output import format_time, plain

__all__ = ["evidence_lines", "evidence_summary"]

MAX_SHOWN_CHARS: Final = 400
"""A result or output longer than this is cut (`effect show --json` has it whole)."""


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 1] + "…"


def evidence_summary(found: Mapping[str, Any]) -> str:
    """One sentence: what the body did, by its runner's own record."""
    when = format_time(found.get("finishedAt"))
    result = found.get("result")
    if found.get("status") == "rejected":
        return f"its body failed at {when}: {_cut(plain(found.get('error')))}"
    if isinstance(result, Mapping) and isinstance(result.get("exitCode"), int):
        return f"its command finished at {when} with exit code {result['exitCode']}"
    return f"its body finished at {when} and returned a result"


def evidence_lines(effect: Mapping[str, Any]) -> list[str]:
    """The evidence of `effect` (a record with `evidence`) as lines, ending with the command
    that accepts it; empty when it has none."""
    found = effect.get("evidence")
    if not isinstance(found, Mapping):
        return []
    effect_id = plain(effect.get("effectId"))
    lines = [
        f"evidence for {effect_id}: {evidence_summary(found)} (attempt"
        f" {plain(found.get('attemptId'))}; its runner wrote it, the server never got the report)"
    ]
    result = found.get("result")
    if isinstance(result, Mapping) and "stdout" in result:
        for stream in ("stdout", "stderr"):
            if result.get(stream):
                lines.append(f"  {stream}: {_cut(plain(result.get(stream)))}")
    elif found.get("status") == "applied" and result is not None:
        lines.append(f"  result: {_cut(json.dumps(result, sort_keys=True))}")
    lines.append(
        f"  if that is what happened: pi-workflows effect resolve {effect_id} --from-evidence"
    )
    return lines
