"""`run show` for people: one run's status, attempts with their timings, errors and
tracebacks, messages, effects, what it waits on, and its output.

Owns the human rendering of a `RunView`. It fits an 80-column terminal: ids, statuses and
times are never cut or wrapped (free text such as errors wraps instead), and internal terms
(the run and queue statuses, the revision, the claim generation, the runner, attempt ids)
appear only with `verbose`. Text from the server or from workflows is wrapped in
`rich.text.Text`, never interpreted as markup. Never contacts a server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pi_workflows.cli.output import format_duration, format_time, plain, records, status_text

__all__ = ["render_run", "render_summary"]

_SHOWN_MESSAGES: Final = frozenset({"notification", "terminal"})
"""Workflow messages `run show` lists: notify nodes and the run's end (the step and decision
texts are what the Pi session shows; `--json` has every message)."""

TRACEBACK_LINES: Final = 40
"""Lines of a traceback `run show` prints (its end); `run logs` has the rest."""

_ANSWER_HINTS: Final = {
    "checkpoint": "pi-workflows checkpoint answer {run} --value JSON",
    "decision": "pi-workflows decision answer {run} --choice ID",
    "agent": "pi-workflows interaction submit {run} --output JSON",
    "assistant": "pi-workflows interaction submit {run} --output JSON",
}


def _fields() -> Table:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    return table


def _table(title: str) -> Table:
    return Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)


def render_summary(view: Mapping[str, Any], *, verbose: bool = False) -> Table:
    """The run's fields: id, workflow, status, node, times and error (and, with
    `verbose`, the internal run and queue statuses, revision, generation and runner)."""
    fields = _fields()
    status = status_text(view.get("status"))
    if view.get("parkReason"):
        status.append(f" ({plain(view.get('parkReason'))})")
    fields.add_row("run", Text(plain(view.get("runId"))))
    fields.add_row("workflow", Text(plain(view.get("workflow"))))
    fields.add_row("status", status)
    fields.add_row("node", Text(plain(view.get("currentNode"))))
    fields.add_row("started", Text(format_time(view.get("createdAt"))))
    finished = view.get("finishedAt")
    if finished is not None:
        took = format_duration(view.get("createdAt"), finished)
        fields.add_row("finished", Text(f"{format_time(finished)} (took {took})"))
    else:
        fields.add_row("updated", Text(format_time(view.get("updatedAt"))))
    if view.get("error") is not None:
        fields.add_row("error", Text(plain(view.get("error")), style="red"))
    if verbose:
        if view.get("parkDetail"):
            fields.add_row("park detail", Text(plain(view.get("parkDetail"))))
        fields.add_row(
            "run / queue",
            Text(f"{plain(view.get('runStatus'))} / {plain(view.get('queueStatus'))}"),
        )
        fields.add_row("revision", Text(plain(view.get("revision"))))
        fields.add_row("generation", Text(plain(view.get("generation"))))
        fields.add_row("steps", Text(plain(view.get("stepCount"))))
        runner = view.get("runner")
        if isinstance(runner, Mapping):
            fields.add_row(
                "runner",
                Text(
                    f"pid {plain(runner.get('pid'))}, {plain(runner.get('status'))}, "
                    f"epoch {plain(runner.get('runnerEpoch'))}"
                ),
            )
        fields.add_row("origin", Text(plain(view.get("origin"))))
        if view.get("originSession"):
            fields.add_row("session", Text(plain(view.get("originSession"))))
    return fields


def _waiting(view: Mapping[str, Any]) -> RenderableType | None:
    waiting = view.get("waitingOn")
    if not isinstance(waiting, Mapping):
        return None
    fields = _fields()
    kind = plain(waiting.get("kind"))
    fields.add_row("waits for", Text(f"a {kind} answer at node {plain(waiting.get('nodeId'))}"))
    if waiting.get("status") == "validating":
        fields.add_row("status", Text("an answer is being validated"))
    request = waiting.get("request")
    if isinstance(request, Mapping):
        for key in ("question", "title", "prompt", "message"):
            if isinstance(request.get(key), str):
                fields.add_row(key, Text(str(request[key])))
        choices = request.get("choices")
        if isinstance(choices, list) and choices:
            shown = [
                f"{plain(c.get('id'))} ({plain(c.get('label'))})"
                if isinstance(c, Mapping)
                else plain(c)
                for c in choices
            ]
            fields.add_row("choices", Text(", ".join(shown)))
        if not any(isinstance(request.get(k), str) for k in ("question", "title", "prompt")):
            fields.add_row("request", Text(json.dumps(request, sort_keys=True, ensure_ascii=False)))
    if waiting.get("deadlineAt") is not None:
        fields.add_row("deadline", Text(format_time(waiting.get("deadlineAt"))))
    hint = _ANSWER_HINTS.get(kind)
    if hint:
        fields.add_row("answer", Text(hint.format(run=plain(view.get("runId")))))
    fields.add_row("request id", Text(plain(waiting.get("requestId"))))
    return Group(Text("Waiting", style="bold"), fields)


def _attempts(attempts: Sequence[Mapping[str, Any]], verbose: bool) -> Table:
    table = _table("Attempts")
    if verbose:
        table.add_column("attempt", no_wrap=True)
    table.add_column("node", overflow="ellipsis", max_width=18)
    table.add_column("visit", no_wrap=True, justify="right")
    table.add_column("started", no_wrap=True)
    table.add_column("took", no_wrap=True, justify="right")
    table.add_column("outcome", no_wrap=True)
    table.add_column("error", overflow="fold")
    for attempt in attempts:
        visit = f"{plain(attempt.get('visit'))}"
        if attempt.get("attemptNo", 1) != 1:
            visit += f".{plain(attempt.get('attemptNo'))}"
        row = [
            Text(plain(attempt.get("nodeId"))),
            Text(visit),
            Text(format_time(attempt.get("startedAt"), short=True)),
            Text(format_duration(attempt.get("startedAt"), attempt.get("finishedAt"))),
            status_text(attempt.get("status")),
            Text(plain(attempt.get("error")) if attempt.get("error") else "", style="red"),
        ]
        if verbose:
            row.insert(0, Text(plain(attempt.get("attemptId"))))
        table.add_row(*row)
    return table


def _tracebacks(attempts: Sequence[Mapping[str, Any]], run_id: str) -> list[RenderableType]:
    parts: list[RenderableType] = []
    for attempt in attempts:
        trace = attempt.get("traceback")
        if not isinstance(trace, str) or not trace:
            continue
        lines = trace.rstrip("\n").splitlines()
        cut = len(lines) > TRACEBACK_LINES
        node, visit = plain(attempt.get("nodeId")), plain(attempt.get("visit"))
        title = Text(f"Traceback of node {node} (visit {visit})", style="bold")
        body = "\n".join(lines[-TRACEBACK_LINES:])
        if cut:
            body = (
                f"... ({len(lines) - TRACEBACK_LINES} more lines: "
                f"pi-workflows run logs {run_id} --node {plain(attempt.get('nodeId'))})\n{body}"
            )
        parts.extend([title, Text(body, style="dim")])
    return parts


def _messages(messages: Sequence[Mapping[str, Any]]) -> Table:
    table = _table("Messages")
    table.add_column("time", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("text", overflow="fold")
    for message in messages:
        table.add_row(
            Text(format_time(message.get("createdAt"), short=True)),
            Text(plain(message.get("kind"))),
            Text(plain(message.get("text"))),
        )
    return table


def _effects(effects: Sequence[Mapping[str, Any]], verbose: bool) -> Table:
    table = _table("Effects")
    table.add_column("effect", no_wrap=True)
    table.add_column("node", overflow="ellipsis", max_width=16)
    table.add_column("type", overflow="fold")
    if verbose:
        table.add_column("kind", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for effect in effects:
        row = [
            Text(plain(effect.get("effectId"))),
            Text(plain(effect.get("nodeId"))),
            Text(plain(effect.get("type"))),
            status_text(effect.get("status")),
        ]
        if verbose:
            row.insert(3, Text(plain(effect.get("kind"))))
        table.add_row(*row)
    return table


def render_run(view: Mapping[str, Any], *, verbose: bool = False) -> RenderableType:
    """A `RunView`: summary, what it waits on, attempts, tracebacks, messages, effects and
    output."""
    parts: list[RenderableType] = [render_summary(view, verbose=verbose)]
    waiting = _waiting(view)
    if waiting is not None:
        parts.extend([Text(""), waiting])
    attempts = records(view.get("attempts"))
    if attempts:
        parts.append(_attempts(attempts, verbose))
        omitted = view.get("attemptsOmitted")
        if isinstance(omitted, int) and omitted:
            parts.append(Text(f"({omitted} older attempts not shown)", style="dim"))
        parts.extend(_tracebacks(attempts, plain(view.get("runId"))))
    messages = [m for m in records(view.get("messages")) if m.get("kind") in _SHOWN_MESSAGES]
    if messages:
        parts.append(_messages(messages))
    effects = records(view.get("effects"))
    if effects:
        parts.append(_effects(effects, verbose))
    if view.get("output") is not None:
        parts.append(Text("Output", style="bold"))
        parts.append(Text(json.dumps(view.get("output"), indent=2, sort_keys=True)))
    elif isinstance(view.get("outputRef"), Mapping):
        parts.append(Text("Output: large; see --json", style="bold"))
    return Group(*parts)
