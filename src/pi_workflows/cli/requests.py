"""What an open request asks, for people: the rows `run show`, `interaction list` and the
watch view's answer dialog print.

Owns the reading of a request as the server stores it (`docs/protocol.md`, Interactive
requests): an agent step's prompt and expected output (which ends with the schema of a
typed `output=`) and its tool limit, an assistant-message step's prompt, every key of a
checkpoint's request (its question first, and the expected answer of a typed `answer=`),
and a human decision's title, details and choices. Pure: never contacts a server, and
returns plain strings the caller wraps (never markup).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["request_rows"]

CHECKPOINT_CONTRACT_KEYS: Final = frozenset({"expectedAnswer", "answerSchema"})
"""Keys a checkpoint with `answer=` adds to its request; `expectedAnswer` (which ends with
the schema) is shown as `expected`, the schema itself not again."""


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def request_rows(kind: Any, request: Any) -> list[tuple[str, str]]:
    """`(label, text)` rows saying what the request of `kind` asks, in reading order."""
    if not isinstance(request, Mapping):
        return [] if request is None else [("request", _text(request))]
    if kind in ("agent", "assistant"):
        return _step_rows(kind, request)
    if kind == "decision":
        return _decision_rows(request)
    if kind == "checkpoint":
        rows = [("question", _text(request.get("question", "")))]
        for key in sorted(request):
            if key != "question" and key not in CHECKPOINT_CONTRACT_KEYS:
                rows.append((str(key), _text(request[key])))
        if isinstance(request.get("expectedAnswer"), str):
            rows.append(("expected", str(request["expectedAnswer"])))
        return rows
    return [("request", json.dumps(request, sort_keys=True, ensure_ascii=False))]


def _step_rows(kind: str, request: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [("prompt", _text(request.get("prompt", "")))]
    if kind == "assistant":
        rows.append(("output", "the reply text (submit it as a JSON string)"))
    elif request.get("expectedOutput") is not None:
        rows.append(("expected", _text(request["expectedOutput"])))
    tools = request.get("allowedTools")
    if isinstance(tools, list):
        named = [str(tool) for tool in tools if tool != "workflow"]
        rows.append(("tools", ", ".join(named) + " and workflow" if named else "only workflow"))
    return rows


def _decision_rows(request: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = [("title", _text(request.get("title", "")))]
    if request.get("details"):
        rows.append(("details", _text(request["details"])))
    lines = []
    for item in request.get("choices") or []:
        if not isinstance(item, Mapping):
            lines.append(_text(item))
            continue
        label = f"{item.get('id')}: {item.get('label') or item.get('id')}"
        lines.append(label + (f" - {item['description']}" if item.get("description") else ""))
    if lines:
        rows.append(("choices", "\n".join(lines)))
    return rows
