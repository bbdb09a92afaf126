"""`run show` for people: one run's status, its latest progress, attempts with their
timings, errors and tracebacks, messages, effects, what it waits on (all that its request
asks: `cli/requests.py`), and its output.

Owns the human rendering of a `RunView`. It fits the terminal it is printed to (80 columns
when not a terminal): ids, statuses and times are never cut; the attempts and effects
tables are laid out at print time, an effect's type moving under its node and an attempt's
error being cut with `…` (or listed under the table) where they do not fit; free text such
as the run's error and tracebacks wraps. Internal terms
(the run and queue statuses, the revision, the claim generation, the runner, attempt ids)
appear only with `verbose`. Text from the server or from workflows is wrapped in
`rich.text.Text`, never interpreted as markup. Never contacts a server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rich import box
from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from pi_workflows.cli.evidence_text import evidence_lines
from pi_workflows.cli.lineage_text import upgrade_lines
from pi_workflows.cli.output import (
    format_duration,
    format_time,
    plain,
    records,
    status_text,
)
from pi_workflows.cli.requests import request_rows
from pi_workflows.cli.tree_text import tree_parts

__all__ = ["progress_line", "render_run", "render_summary"]

_SHOWN_MESSAGES: Final = frozenset({"notification", "terminal"})
"""Workflow messages `run show` lists: notify nodes and the run's end (the step and decision
texts are what the Pi session shows; `--json` has every message)."""

ERROR_MIN_WIDTH: Final = 16
"""Narrowest the error column of the attempts table may get before errors move below it."""

_GAP: Final = 3  # characters between two columns of a `SIMPLE_HEAD` table

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
    return Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
    )


def progress_line(progress: Any) -> Text | None:
    """The run's latest ``publish_update`` value as one line: its node, the value (as the
    view's one-line ``text``), how many were published and when the latest came."""
    if not isinstance(progress, Mapping):
        return None
    line = Text(f"{plain(progress.get('nodeId'))}: ")
    line.append(plain(progress.get("text")))
    count = progress.get("published")
    many = f"{count} published, " if isinstance(count, int) and count > 1 else ""
    line.append(f" ({many}at {format_time(progress.get('at'), short=True)})", style="dim")
    return line


def _published(fields: Table, view: Mapping[str, Any]) -> None:
    """The keys the run published (ctx.publish); `run get RUN KEY` reads one."""
    keys = view.get("published")
    if isinstance(keys, list) and keys:
        shown = ", ".join(plain(k.get("key")) for k in keys if isinstance(k, Mapping))
        fields.add_row("published", Text(shown[:300] + ("..." if len(shown) > 300 else "")))


def render_summary(view: Mapping[str, Any], *, verbose: bool = False) -> Table:
    """The run's fields: id, workflow, status, node, its latest progress, times, execution
    mode, origin session, recorded working directory and variable names, lineage,
    the schedule that started it and error (and, with `verbose`, the internal run and queue
    statuses, revision, generation, runner and who started it)."""
    fields = _fields()
    status = status_text(view.get("status"))
    if view.get("parkReason"):
        status.append(f" ({plain(view.get('parkReason'))})")
    fields.add_row("run", Text(plain(view.get("runId"))))
    fields.add_row("workflow", Text(plain(view.get("workflow"))))
    fields.add_row("status", status)
    fields.add_row("node", Text(plain(view.get("currentNode"))))
    latest = progress_line(view.get("progress"))
    if latest is not None:
        fields.add_row("progress", latest)
    _published(fields, view)
    fields.add_row("started", Text(format_time(view.get("createdAt"))))
    began = view.get("roundStartedAt") or view.get("createdAt")
    if began != view.get("createdAt"):
        fields.add_row("restarted", Text(format_time(began) + _round_note(view)))
    finished = view.get("finishedAt")
    if finished is not None:
        took = format_duration(began, finished)  # this round's own time
        fields.add_row("finished", Text(f"{format_time(finished)} (took {took})"))
    else:
        fields.add_row("updated", Text(format_time(view.get("updatedAt"))))
    _deadline(fields, view)
    _cleanup(fields, view)
    if view.get("executionMode") is not None:
        fields.add_row("mode", Text(plain(view.get("executionMode"))))
    if view.get("originSession"):
        fields.add_row("session", Text(plain(view.get("originSession"))))
    _environment(fields, view)
    _settings(fields, view)
    _lineage(fields, view)
    started_by = view.get("schedule")
    if isinstance(started_by, Mapping):
        fields.add_row(
            "schedule",
            Text(
                f"{plain(started_by.get('name'))} (fire time"
                f" {format_time(started_by.get('fireAt'))})"
            ),
        )
    if view.get("error") is not None:
        fields.add_row("error", Text(plain(view.get("error")), style="red"))
    if view.get("parkDetail"):
        fields.add_row("why", Text(plain(view.get("parkDetail"))))
    step = next_step(view)
    if step is not None:
        fields.add_row("next", Text(step, style="bold"))
    if verbose:
        _internals(fields, view)
    return fields


def _internals(fields: Table, view: Mapping[str, Any]) -> None:
    """`--verbose`: the internal run and queue statuses, revision, generation, steps, the
    runner and who started the run."""
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


def _deadline(fields: Table, view: Mapping[str, Any]) -> None:
    """The run deadline: when it passes (or passed) and how long it was from the start."""
    deadline = view.get("deadline")
    if not isinstance(deadline, Mapping):
        return
    at, duration = deadline.get("at"), deadline.get("durationMs")
    length = format_duration(0, duration) if isinstance(duration, int) else "?"
    fields.add_row("deadline", Text(f"{format_time(at)} ({length} from the start)"))


def _cleanup(fields: Table, view: Mapping[str, Any]) -> None:
    """The cleanup node after a cancel or a run deadline: running, or how it ended."""
    cleanup = view.get("cleanup")
    if not isinstance(cleanup, Mapping):
        return
    status = plain(cleanup.get("status"))
    line = f"{plain(cleanup.get('nodeId'))} {status}"
    if status == "running":
        line += f" (the run then ends {plain(cleanup.get('endsAs'))})"
    if cleanup.get("error"):
        line += f": {plain(cleanup.get('error'))}"
    fields.add_row("cleanup", Text(line))


ENVIRONMENT_NAMES_SHOWN = 12
"""Variable names `run show` lists before "and N more" (`--json` has them all)."""


def _environment(fields: Table, view: Mapping[str, Any]) -> None:
    """The run's recorded working directory and its variables' names (never their values:
    `run show` output is pasted into issues and chats)."""
    recorded = view.get("environment")
    if not isinstance(recorded, Mapping):
        return
    fields.add_row("directory", Text(plain(recorded.get("workingDirectory") or "/")))
    listed = recorded.get("variables")
    names = [plain(name) for name in listed] if isinstance(listed, list) else []
    shown = ", ".join(names[:ENVIRONMENT_NAMES_SHOWN]) or "none"
    if len(names) > ENVIRONMENT_NAMES_SHOWN:
        shown += f" and {len(names) - ENVIRONMENT_NAMES_SHOWN} more (run show --json)"
    fields.add_row("variables", Text(shown))


SETTINGS_SHOWN = 160
"""Characters of the settings document `run show` prints (`run settings` prints them all)."""


def _settings(fields: Table, view: Mapping[str, Any]) -> None:
    """The run's live settings: their change number and the document, cut short."""
    found = view.get("settings")
    if not isinstance(found, Mapping):
        return
    document = json.dumps(found.get("settings"), ensure_ascii=False, separators=(", ", ": "))
    if len(document) > SETTINGS_SHOWN:
        document = document[: SETTINGS_SHOWN - 3] + "..."
    fields.add_row("settings", Text(f"change {plain(found.get('change'))}: {document}"))


def _round_note(view: Mapping[str, Any]) -> str:
    """` (round 2; round 1 ended completed)` for a restarted run, from its lineage."""
    lineage = view.get("lineage")
    rounds = records(lineage.get("rounds")) if isinstance(lineage, Mapping) else []
    if not rounds:
        return ""
    last = rounds[-1]
    number = last.get("round")
    if not isinstance(number, int) or not last.get("from"):
        return f" (round {plain(number)})"
    return f" (round {number}; round {number - 1} ended {plain(last.get('from'))})"


LINEAGE_FORKS_SHOWN: Final = 5
"""Forks of a run `run show` names (`run list --lineage` lists them all)."""


def _lineage(fields: Table, view: Mapping[str, Any]) -> None:
    """The rows of where the run came from (its parent, or the run and node it was forked
    from) and what came from it (its forks)."""
    lineage = view.get("lineage") if isinstance(view.get("lineage"), Mapping) else {}
    assert isinstance(lineage, Mapping)
    if view.get("parentRunId"):
        parent = f"{plain(view.get('parentRunId'))} (depth {plain(view.get('depth'))}"
        if view.get("rootRunId") != view.get("parentRunId"):
            parent += f", root {plain(view.get('rootRunId'))}"
        fields.add_row("parent", Text(parent + ")"))
    source = lineage.get("forkedFrom")
    if isinstance(source, Mapping):
        text = (
            f"{plain(source.get('runId'))} at node {plain(source.get('nodeId'))} (visit"
            f" {plain(source.get('visit'))}); {plain(lineage.get('carriedAttempts'))} node"
            " result(s) carried"
        )
        if source.get("exists") is False:
            text += " (that run was removed)"
        fields.add_row("forked from", Text(text))
    forks = records(lineage.get("forks"))
    if forks:
        shown = ", ".join(
            f"{plain(f.get('runId'))} ({plain(f.get('status'))})"
            for f in forks[:LINEAGE_FORKS_SHOWN]
        )
        more = len(forks) - LINEAGE_FORKS_SHOWN + int(lineage.get("forksOmitted") or 0)
        if more > 0:
            shown += f" and {more} more: pi-workflows run list --lineage {plain(view.get('runId'))}"
        fields.add_row("forks", Text(shown))


def next_step(view: Mapping[str, Any]) -> str | None:
    """The server's one line saying what a person does next with the run (`nextStep`,
    computed once by the server for every seat: `store/next_steps.py`), or None."""
    step = view.get("nextStep")
    return None if step is None else plain(step)


def _durable_wait(view: Mapping[str, Any]) -> RenderableType | None:
    """The run's pending sleep, retry delay or event wait, and how to move it on."""
    wait = view.get("wait")
    if not isinstance(wait, Mapping):
        return None
    fields = _fields()
    fields.add_row("waits", Text(plain(wait.get("text"))))
    if wait.get("dueAt") is not None:
        label = "times out" if wait.get("kind") == "event" else "until"
        fields.add_row(label, Text(format_time(wait.get("dueAt"))))
    if wait.get("kind") == "event":
        run_id, name = plain(view.get("runId")), plain(wait.get("event"))
        fields.add_row("send", Text(f"pi-workflows run signal {run_id} {name} --data JSON"))
    return Group(Text("Waiting", style="bold"), fields)


def _signals(view: Mapping[str, Any]) -> Table | None:
    """The events sent to the run: which a wait took, which wait still, which were refused."""
    sent = records(view.get("signals"))
    if not sent:
        return None
    table = _table("Events")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("sent", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("note", overflow="fold")
    for signal in sent:
        note = signal.get("error") or ""
        table.add_row(
            Text(plain(signal.get("seq"))),
            Text(plain(signal.get("name"))),
            Text(format_time(signal.get("createdAt"), short=True)),
            status_text(signal.get("status")),
            Text(plain(note), style="red" if note else ""),
        )
    return table


def delivery_text(found: Any) -> Text | None:
    """Where a model step's delivery to its seat stands (``waitingOn.delivery``): the
    state, what it means and since when; a stalled step in red."""
    if not isinstance(found, Mapping):
        return None
    state = plain(found.get("state"))
    since = found.get("since")
    when = (
        f"due {format_time(found.get('dueAt'))}"
        if found.get("dueAt") is not None
        else f"since {format_time(since)}, {format_duration(since, time.time() * 1000)}"
    )
    return Text(
        f"{state}: {plain(found.get('detail'))} ({when})",
        style="bold red" if state == "stalled" else "",
    )


def _waiting(view: Mapping[str, Any]) -> RenderableType | None:
    waiting = view.get("waitingOn")
    if not isinstance(waiting, Mapping):
        return _durable_wait(view)
    fields = _fields()
    kind = plain(waiting.get("kind"))
    article = "an" if kind[:1] in "aeiou" else "a"
    fields.add_row(
        "waits for", Text(f"{article} {kind} answer at node {plain(waiting.get('nodeId'))}")
    )
    if waiting.get("status") == "validating":
        fields.add_row("status", Text("an answer is being validated"))
    for label, text in request_rows(kind, waiting.get("request")):
        fields.add_row(label, Text(text))
    if waiting.get("deadlineAt") is not None:
        fields.add_row("deadline", Text(format_time(waiting.get("deadlineAt"))))
    delivered = delivery_text(waiting.get("delivery"))
    if delivered is not None:
        fields.add_row("delivery", delivered)
    channels = view.get("channels")
    if isinstance(channels, list) and channels:  # `run show` adds them (docs/channels.md)
        fields.add_row(
            "channels",
            Text(
                "; ".join(
                    f"{c['name']}: {c['state']}" + (f" ({c['detail']})" if c.get("detail") else "")
                    for c in channels
                )
            ),
        )
    hint = _ANSWER_HINTS.get(kind)
    if view.get("runStatus") == "paused" and view.get("parkReason") == "workflowSourceChanged":
        # A resume is refused (it would park again): the code must be settled first.
        run_id = plain(view.get("runId"))
        fields.add_row(
            "answer",
            Text(
                f"after pi-workflows run upgrade {run_id} (see what it would change with"
                f" --dry-run first), or start it over: pi-workflows run restart {run_id}, or end"
                f" it: pi-workflows run cancel {run_id}"
            ),
        )
    elif view.get("runStatus") == "paused":
        # An answer to a paused run is refused: resume it first.
        fields.add_row("answer", Text(f"after pi-workflows run resume {plain(view.get('runId'))}"))
    elif hint:
        fields.add_row("answer", Text(hint.format(run=plain(view.get("runId")))))
    fields.add_row("request id", Text(plain(waiting.get("requestId"))))
    return Group(Text("Waiting", style="bold"), fields)


class _Attempts:
    """The attempts table, laid out for the width it is printed at: node ids, visits, times
    and outcomes are never cut (with `verbose`, each attempt id sits under its node); the
    error takes the rest of the line and is cut with `…`, or, when less than
    `ERROR_MIN_WIDTH` is left, is listed under the table instead."""

    def __init__(self, attempts: Sequence[Mapping[str, Any]], verbose: bool) -> None:
        self.attempts = attempts
        self.verbose = verbose

    def _cells(self, attempt: Mapping[str, Any]) -> list[Text]:
        visit = f"{plain(attempt.get('visit'))}"
        if attempt.get("attemptNo", 1) != 1:
            visit += f".{plain(attempt.get('attemptNo'))}"
        node = Text(plain(attempt.get("nodeId")))
        if self.verbose:
            node.append(f"\n{plain(attempt.get('attemptId'))}", style="dim")
        return [
            node,
            Text(visit),
            Text(format_time(attempt.get("startedAt"), short=True)),
            Text(format_duration(attempt.get("startedAt"), attempt.get("finishedAt"))),
            _outcome(attempt),
        ]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rows = [self._cells(attempt) for attempt in self.attempts]
        headings = ["node", "visit", "started", "took", "outcome"]
        widths = [
            max([len(heading), *(cell.cell_len for row in rows for cell in _lines(row[i]))])
            for i, heading in enumerate(headings)
        ]
        left = options.max_width - sum(widths) - _GAP * len(widths)
        errors = [plain(a.get("error")) if a.get("error") else "" for a in self.attempts]
        inline = left >= ERROR_MIN_WIDTH or not any(errors)
        table = _table("Attempts")
        for index, heading in enumerate(headings):
            justify: JustifyMethod = "right" if heading in ("visit", "took") else "left"
            if heading == "node":  # an id wraps rather than being cut in a very narrow view
                table.add_column(heading, overflow="fold", min_width=min(widths[0], 12))
            else:
                table.add_column(heading, no_wrap=True, min_width=widths[index], justify=justify)
        if inline:
            table.add_column("error", no_wrap=True, overflow="ellipsis", max_width=max(left, 1))
        for row, error in zip(rows, errors, strict=True):
            table.add_row(*row, *([Text(error, style="red")] if inline else []))
        yield table
        if not inline:
            for attempt, error in zip(self.attempts, errors, strict=True):
                if error:
                    where = f"{plain(attempt.get('nodeId'))} (visit {plain(attempt.get('visit'))})"
                    yield Text(f"{where}: {error}", style="red")


def _outcome(attempt: Mapping[str, Any]) -> Text:
    """An attempt's outcome; a retried try says what it ended with and which try of its
    round it was (``failed, retried (try 1)``), a later try its number (``completed (try
    2)``)."""
    status = attempt.get("status")
    try_no = attempt.get("tryNo")
    tried = f" (try {try_no})" if isinstance(try_no, int) else ""
    if status in ("retried", "exhausted") and attempt.get("retryOutcome"):
        text = status_text(attempt.get("retryOutcome"))
        text.append(f", {plain(status)}{tried}", style="yellow")
        return text
    text = status_text(status)
    if isinstance(try_no, int) and try_no > 1:
        text.append(tried)
    if attempt.get("carriedFrom"):
        edited = ", output set by a person" if attempt.get("outputSetBy") else ""
        text.append(f" (carried{edited})", style="dim")
    change = attempt.get("settingsChange")
    if isinstance(change, int) and change > 0:  # it started after a settings change
        text.append(f" (settings {change})", style="dim")
    return text


def _lines(text: Text) -> list[Text]:
    return list(text.split("\n"))


def _try_of(attempt: Mapping[str, Any]) -> str:
    """An attempt's try within its visit: the retry policy's try, else its attempt number."""
    number = attempt.get("tryNo")
    return plain(number if isinstance(number, int) else attempt.get("attemptNo", 1))


def _tracebacks(attempts: Sequence[Mapping[str, Any]], run_id: str) -> list[RenderableType]:
    """Each failed try's traceback (its end), labelled with its node, visit and try; the
    tracebacks of a visit that then completed are summarised in one line instead, with the
    command that prints them (`run logs`)."""
    completed = {
        (a.get("nodeId"), a.get("visit")): a for a in attempts if a.get("status") == "completed"
    }
    parts: list[RenderableType] = []
    summarised: set[tuple[Any, Any]] = set()
    for attempt in attempts:
        trace = attempt.get("traceback")
        if not isinstance(trace, str) or not trace:
            continue
        node, visit = plain(attempt.get("nodeId")), plain(attempt.get("visit"))
        key = (attempt.get("nodeId"), attempt.get("visit"))
        if key in completed:
            if key not in summarised:
                summarised.add(key)
                failed = sum(
                    1 for a in attempts
                    if (a.get("nodeId"), a.get("visit")) == key and a.get("traceback")
                )  # fmt: skip
                times = "once" if failed == 1 else f"{failed} times"
                parts.append(
                    Text(
                        f"node {node} (visit {visit}) failed {times} before it completed on try"
                        f" {_try_of(completed[key])}; its tracebacks: pi-workflows run logs"
                        f" {run_id} --node {node}",
                        style="dim",
                    )
                )
            continue
        lines = trace.rstrip("\n").splitlines()
        cut = len(lines) > TRACEBACK_LINES
        title = Text(
            f"Traceback of node {node} (visit {visit}, try {_try_of(attempt)})", style="bold"
        )
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


class _Effects:
    """The effects table, laid out for the width it is printed at: effect ids, node ids,
    types and statuses are never cut; when they do not fit side by side, each effect's type
    moves under its node (with `verbose`, followed by its kind)."""

    def __init__(self, effects: Sequence[Mapping[str, Any]], verbose: bool) -> None:
        self.effects = effects
        self.verbose = verbose

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        def widest(key: str, heading: str) -> int:
            return max([len(heading), *(len(plain(e.get(key))) for e in self.effects)])

        effect_w, node_w = widest("effectId", "effect"), widest("nodeId", "node")
        type_w = widest("type", "type")
        kind_w = widest("kind", "kind") if self.verbose else 0
        status_w = widest("status", "status")
        columns = 4 + (1 if self.verbose else 0)
        wide = (
            effect_w + node_w + type_w + kind_w + status_w + _GAP * (columns - 1)
            <= options.max_width
        )
        table = _table("Effects")
        table.add_column("effect", no_wrap=True, min_width=effect_w)
        if wide:
            table.add_column("node", no_wrap=True)
            table.add_column("type", no_wrap=True)
            if self.verbose:
                table.add_column("kind", no_wrap=True)
            table.add_column("status", no_wrap=True)
        else:  # the type (and kind) under the node; ids wrap, never cut
            table.add_column("node / type", overflow="fold", min_width=12)
            table.add_column("status", no_wrap=True)
        for effect in self.effects:
            node, kind = Text(plain(effect.get("nodeId"))), Text(plain(effect.get("kind")))
            status = status_text(effect.get("status"))
            row = [Text(plain(effect.get("effectId"))), node]
            if wide:
                row.append(Text(plain(effect.get("type"))))
                row.extend([kind, status] if self.verbose else [status])
            else:
                kind_note = f" ({kind.plain})" if self.verbose else ""
                node.append(f"\n{plain(effect.get('type'))}{kind_note}", style="dim")
                row.append(status)
            table.add_row(*row)
        yield table


def render_run(view: Mapping[str, Any], *, verbose: bool = False) -> RenderableType:
    """A `RunView`: summary, what an upgrade would do (`upgrade`, the plan `run show` adds
    for a run parked on changed code), what it waits on, attempts, tracebacks, messages,
    effects and output."""
    parts: list[RenderableType] = [render_summary(view, verbose=verbose)]
    plan = view.get("upgrade")
    if isinstance(plan, Mapping):
        lines = Table(box=None, show_header=False, pad_edge=True, padding=(0, 0, 0, 2))
        lines.add_column(overflow="fold")
        for line in upgrade_lines(plan):
            lines.add_row(Text(line))
        parts.extend([Text(""), Text("Upgrade (pi-workflows run upgrade)", style="bold"), lines])
    waiting = _waiting(view)
    if waiting is not None:
        parts.extend([Text(""), waiting])
    parts.extend(tree_parts(view))
    attempts = records(view.get("attempts"))
    if attempts:
        parts.append(_Attempts(attempts, verbose))
        omitted = view.get("attemptsOmitted")
        if isinstance(omitted, int) and omitted:
            parts.append(Text(f"({omitted} older attempts not shown)", style="dim"))
        parts.extend(_tracebacks(attempts, plain(view.get("runId"))))
    messages = [m for m in records(view.get("messages")) if m.get("kind") in _SHOWN_MESSAGES]
    if messages:
        parts.append(_messages(messages))
    signals = _signals(view)
    if signals is not None:
        parts.append(signals)
    effects = records(view.get("effects"))
    if effects:
        parts.append(_Effects(effects, verbose))
        parts.extend(Text(line) for e in effects for line in evidence_lines(e))
    if view.get("output") is not None:
        parts.append(Text("Output", style="bold"))
        parts.append(Text(json.dumps(view.get("output"), indent=2, sort_keys=True)))
    elif isinstance(view.get("outputRef"), Mapping):
        parts.append(Text("Output: large; see --json", style="bold"))
    return Group(*parts)
