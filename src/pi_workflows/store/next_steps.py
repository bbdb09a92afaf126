"""What a person does next with a run: the one line every seat shows (`nextStep`).

Owns the computation of a run view's `nextStep`, so `run show`, `watch`, the web page and
any program say the same words. A pure function of the run view (``views.run_view``) and
nothing else: no read, no clock. None when there is nothing to do (the run is queued,
runs, or completed).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["next_step"]

_ANSWER_HINTS: Final = {
    "checkpoint": "pi-workflows checkpoint answer {run} --value JSON",
    "decision": "pi-workflows decision answer {run} --choice ID",
    "agent": "pi-workflows interaction submit {run} --output JSON",
    "assistant": "pi-workflows interaction submit {run} --output JSON",
}
"""The command that answers each kind of open request."""

_RESUME_REASONS: Final = frozenset(
    {"userPaused", "serverStopped", "runnerCrashed", "runnerNoProgress", "agentUnavailable",
     "turnAborted", "retriesExhausted", "proposalRefused", "effectsResolved"}
)  # fmt: skip
"""Park reasons whose next step is `run resume` (the run continues from where it stopped)."""


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _records(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def next_step(view: Mapping[str, Any]) -> str | None:
    """One line saying what a person does next with the run of `view`, or None."""
    run_id = _text(view.get("runId"))
    status, reason = _text(view.get("runStatus") or view.get("status")), view.get("parkReason")
    if status == "paused":
        return _next_for_park(view, run_id, reason)
    if status == "waiting":
        return _next_for_wait(view, run_id)
    if status in ("failed", "timed_out", "cancelled"):
        parent = view.get("parentRunId")
        if parent:
            return f"restart its parent to run it again: pi-workflows run restart {parent}"
        return f"to run it again from the start: pi-workflows run restart {run_id}"
    return None


def _next_for_park(view: Mapping[str, Any], run_id: str, reason: Any) -> str:
    if reason == "effectAmbiguous":
        ambiguous = [
            _text(e.get("effectId")) for e in _records(view.get("effects"))
            if e.get("status") == "ambiguous"
        ]  # fmt: skip
        effect = ambiguous[0] if ambiguous else "EFFECT_ID"
        evidenced = [
            e for e in _records(view.get("effects"))
            if e.get("status") == "ambiguous" and isinstance(e.get("evidence"), Mapping)
        ]  # fmt: skip
        if evidenced and len(ambiguous) == 1:
            return (
                f"its runner left evidence of what effect {effect} did (Effects, below): if"
                f" that is what happened, pi-workflows effect resolve {effect} --from-evidence,"
                f" then pi-workflows run resume {run_id}"
            )
        more = (
            f" (and {len(ambiguous) - 1} more: effect list {run_id})" if len(ambiguous) > 1 else ""
        )
        return (
            f"decide what effect {effect} did{more}: pi-workflows effect resolve {effect}"
            f" --applied|--rejected|--retry, then pi-workflows run resume {run_id}"
        )
    if reason == "workflowSourceChanged":
        return (
            f"continue it on the new code after a dry run: pi-workflows run upgrade {run_id}"
            f" --dry-run, then pi-workflows run upgrade {run_id}; or start it over: pi-workflows"
            f" run restart {run_id}; or end it: pi-workflows run cancel {run_id}; or put the"
            f" workflow's files back as they were, then pi-workflows run resume {run_id}"
        )
    if reason == "workflowLoadFailed":
        return (
            f"make the workflow's files load again, then pi-workflows run resume {run_id}; or"
            f" start it over: pi-workflows run restart {run_id}"
        )
    if reason in _RESUME_REASONS:
        return f"pi-workflows run resume {run_id}"
    return f"pi-workflows run resume {run_id} (or run cancel)"


def _next_for_wait(view: Mapping[str, Any], run_id: str) -> str | None:
    waiting = view.get("waitingOn")
    if isinstance(waiting, Mapping):
        if waiting.get("status") == "validating":
            return "an answer is being validated; nothing to do unless it is rejected"
        hint = _ANSWER_HINTS.get(_text(waiting.get("kind")))
        return None if hint is None else hint.format(run=run_id)
    wait = view.get("wait")
    if not isinstance(wait, Mapping):
        return None
    match wait.get("kind"):
        case "event":
            return f"pi-workflows run signal {run_id} {_text(wait.get('event'))} --data JSON"
        case "children":
            return "nothing: it continues when its child runs end (below)"
    due = wait.get("dueAt")
    if isinstance(due, int) and not isinstance(due, bool):
        at = dt.datetime.fromtimestamp(due / 1000, tz=dt.UTC).astimezone()
        return f"nothing: it continues by itself at {at.strftime('%Y-%m-%d %H:%M:%S')}"
    return "nothing: it continues by itself"
