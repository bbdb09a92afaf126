"""Printing results: stable JSON for `--json`, rich tables for people.

Owns every renderer of server data (run views, run lists, workflows, status, problems). Text
that came from the server or from workflows is always wrapped in `rich.text.Text`, so it is
never interpreted as rich markup and control characters are stripped. JSON output is the
server's camelCase data with sorted keys, two-space indents and a trailing newline. This
module never contacts a server and never prints secrets (the protocol carries none).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import click
from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

__all__ = [
    "console",
    "format_time",
    "print_json",
    "render_problems",
    "render_run",
    "render_runs",
    "render_status",
    "render_workflows",
    "status_text",
]

_STATUS_STYLES = {
    "completed": "green",
    "running": "cyan",
    "queued": "cyan",
    "waiting": "yellow",
    "paused": "yellow",
    "failed": "red",
    "timed_out": "red",
    "cancelled": "magenta",
    "ambiguous": "red",
}


def console() -> Console:
    """A console on the current stdout (looked up at print time, so tests can capture it)."""
    return Console(highlight=False)


def print_json(value: Any) -> None:
    """Print `value` as JSON: sorted keys, indented, UTF-8."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def format_time(value: Any, *, short: bool = False) -> str:
    """A millisecond timestamp as local ISO time (`short`: without the zone offset), or `-`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    moment = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC).astimezone()
    if short:
        return moment.strftime("%Y-%m-%d %H:%M:%S")
    return moment.isoformat(timespec="seconds")


def status_text(status: Any) -> Text:
    """A run status, coloured by how it ended."""
    name = _plain(status)
    return Text(name, style=_STATUS_STYLES.get(name, ""))


def render_run(view: Mapping[str, Any]) -> RenderableType:
    """A `RunView`: its fields, what it waits on, attempts, effects, error and output."""
    fields = _field_table()
    status = status_text(view.get("status"))
    reason = view.get("parkReason")
    if reason:
        status.append(f" ({_plain(reason)})")
    _row(fields, "run", view.get("runId"))
    _row(fields, "workflow", view.get("workflow"))
    fields.add_row("status", status)
    _row(
        fields,
        "run / queue",
        f"{_plain(view.get('runStatus'))} / {_plain(view.get('queueStatus'))}",
    )
    if view.get("parkDetail"):
        _row(fields, "park detail", _compact(view.get("parkDetail")))
    _row(fields, "current node", view.get("currentNode"))
    _row(fields, "revision", view.get("revision"))
    _row(fields, "generation", view.get("generation"))
    runner = view.get("runner")
    if isinstance(runner, Mapping):
        _row(
            fields,
            "runner",
            f"pid {_plain(runner.get('pid'))}, {_plain(runner.get('status'))}, "
            f"epoch {_plain(runner.get('runnerEpoch'))}",
        )
    _row(fields, "created", format_time(view.get("createdAt")))
    _row(fields, "updated", format_time(view.get("updatedAt")))
    _row(fields, "finished", format_time(view.get("finishedAt")))
    waiting = view.get("waitingOn")
    if isinstance(waiting, Mapping):
        _row(
            fields,
            "waiting on",
            f"{_plain(waiting.get('kind'))} {_plain(waiting.get('requestId'))} "
            f"at node {_plain(waiting.get('nodeId'))}",
        )
        _row(fields, "request", _compact(waiting.get("request")))
    if view.get("error") is not None:
        fields.add_row("error", Text(_compact(view.get("error")), style="red"))
    parts: list[RenderableType] = [fields]
    attempts = _records(view.get("attempts"))
    if attempts:
        parts.append(
            _table(
                "Attempts",
                ["attempt", "node", "visit", "try", "status"],
                [
                    [
                        a.get("attemptId"),
                        a.get("nodeId"),
                        a.get("visit"),
                        a.get("attemptNo"),
                        a.get("status"),
                    ]
                    for a in attempts
                ],
            )
        )
    effects = _records(view.get("effects"))
    if effects:
        parts.append(
            _table(
                "Effects",
                ["effect", "type", "kind", "node", "status"],
                [
                    [
                        e.get("effectId"),
                        e.get("type"),
                        e.get("kind"),
                        e.get("nodeId"),
                        e.get("status"),
                    ]
                    for e in effects
                ],
            )
        )
    if view.get("output") is not None:
        parts.append(Text("Output", style="bold"))
        parts.append(Text(json.dumps(view.get("output"), indent=2, sort_keys=True)))
    return Group(*parts)


def render_runs(runs: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`run list`: one row per `RunSummary`."""
    if not runs:
        return Text("no runs")
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("run", no_wrap=True, min_width=_widest(runs, "runId"))
    for column in ("workflow", "status", "node", "revision", "updated"):
        table.add_column(column)
    for run in runs:
        table.add_row(
            Text(_plain(run.get("runId"))),
            Text(_plain(run.get("workflow"))),
            status_text(run.get("status")),
            Text(_plain(run.get("currentNode"))),
            Text(_plain(run.get("revision"))),
            Text(format_time(run.get("updatedAt"), short=True)),
        )
    return table


def render_workflows(workflows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`workflows list`: name, origin, path, and the load error if any."""
    if not workflows:
        return Text("no workflows found")
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("name", "origin", "path", "error"):
        table.add_column(column)
    for workflow in workflows:
        table.add_row(
            Text(_plain(workflow.get("name"))),
            Text(_plain(workflow.get("origin"))),
            Text(_plain(workflow.get("path"))),
            Text(_plain(workflow.get("error")) if workflow.get("error") else "", style="red"),
        )
    return table


def render_status(status: Mapping[str, Any]) -> RenderableType:
    """`server status`: the summary fields, runs by status, and live runners."""
    fields = _field_table()
    _row(fields, "pid", status.get("pid"))
    _row(fields, "epoch", status.get("epoch"))
    _row(fields, "version", status.get("version"))
    _row(fields, "socket", status.get("socket"))
    _row(fields, "state dir", status.get("stateDir"))
    _row(fields, "capacity", status.get("capacity"))
    by_status = status.get("runsByStatus")
    if isinstance(by_status, Mapping):
        counts = ", ".join(f"{_plain(k)} {_plain(v)}" for k, v in sorted(by_status.items()))
        _row(fields, "runs", counts or "none")
    _row(fields, "expired claims", status.get("expiredClaims"))
    _row(fields, "pending interactions", status.get("pendingInteractions"))
    _row(fields, "ambiguous effects", status.get("ambiguousEffects"))
    runners = _records(status.get("runners"))
    _row(fields, "runners", len(runners))
    if not runners:
        return fields
    table = _table(
        "Runners",
        ["run", "pid", "status", "runner epoch"],
        [[r.get("runId"), r.get("pid"), r.get("status"), r.get("runnerEpoch")] for r in runners],
    )
    return Group(fields, table)


def render_problems(problems: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`state diagnose` / `state repair`: one row per problem."""
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("code", "run", "repairable", "message"):
        table.add_column(column)
    for problem in problems:
        table.add_row(
            Text(_plain(problem.get("code"))),
            Text(_plain(problem.get("runId"))),
            Text("yes" if problem.get("repairable") else "no"),
            Text(_plain(problem.get("message"))),
        )
    return table


def _field_table() -> Table:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    return table


def _row(table: Table, name: str, value: Any) -> None:
    table.add_row(name, Text(_plain(value)))


def _table(title: str, columns: Iterable[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A titled table; its first column holds ids, which are never cut or wrapped."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD)
    for index, column in enumerate(columns):
        if index == 0:
            widest = max((len(_plain(row[0])) for row in rows if row), default=0)
            table.add_column(column, no_wrap=True, min_width=widest)
        else:
            table.add_column(column)
    for row in rows:
        table.add_row(*(Text(_plain(cell)) for cell in row))
    return table


def _widest(records: Sequence[Mapping[str, Any]], key: str) -> int:
    return max((len(_plain(record.get(key))) for record in records), default=0)


def _records(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def _plain(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return _compact(value)


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
