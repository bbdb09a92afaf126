"""Printing results: stable JSON for `--json`, rich tables for people.

Owns the renderers of server data (run lists, workflows, status, problems; one run is
`show.py`, history and logs `timeline.py`) and their shared helpers. Text
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
    "format_duration",
    "format_time",
    "plain",
    "print_json",
    "records",
    "render_problems",
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
    """A millisecond timestamp as local time, or `-`: `YYYY-MM-DD HH:MM:SS`, or with `short`
    `HH:MM:SS` today and `MM-DD HH:MM` on other days (at most 11 characters)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    moment = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC).astimezone()
    if short:
        if moment.date() == dt.datetime.now().astimezone().date():
            return moment.strftime("%H:%M:%S")
        return moment.strftime("%m-%d %H:%M")
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def format_duration(start: Any, end: Any) -> str:
    """The time from `start` to `end` (milliseconds) as `6 ms`, `1.2 s`, `3m 04s`, `2h 01m`,
    or `-` when either is missing."""
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (start, end)):
        return "-"
    ms = max(0, int(end - start))
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(ms // 1000, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def status_text(status: Any) -> Text:
    """A run status, coloured by how it ended."""
    name = _plain(status)
    return Text(name, style=_STATUS_STYLES.get(name, ""))


def render_runs(runs: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`run list`: one row per `RunSummary`; ids, statuses and times are never cut (the
    workflow and node names give way first), so it fits 80 columns."""
    if not runs:
        return Text("no runs")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("run", no_wrap=True, min_width=_widest(runs, "runId"))
    table.add_column("workflow", overflow="ellipsis", no_wrap=True, ratio=1)
    table.add_column("status", no_wrap=True, min_width=_widest(runs, "status"))
    table.add_column("node", overflow="ellipsis", no_wrap=True, ratio=1)
    table.add_column("updated", no_wrap=True, min_width=11)
    for run in runs:
        table.add_row(
            Text(_plain(run.get("runId"))),
            Text(_plain(run.get("workflow"))),
            status_text(run.get("status")),
            Text(_plain(run.get("currentNode"))),
            Text(format_time(run.get("updatedAt"), short=True)),
        )
    return table


def render_workflows(workflows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`workflows list`: name, origin, path, and the load error if any."""
    if not workflows:
        return Text("no workflows found")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("origin", no_wrap=True)
    table.add_column("path and problems", overflow="fold")
    for workflow in workflows:
        where = Text(_plain(workflow.get("path")))
        for hidden in workflow.get("shadows") or []:
            where.append(f"\nshadows {_plain(hidden)}", style="yellow")
        if workflow.get("error"):
            where.append(f"\nerror: {_plain(workflow.get('error'))}", style="red")
        table.add_row(
            Text(_plain(workflow.get("name"))), Text(_plain(workflow.get("origin"))), where
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


def records(value: Any) -> list[Mapping[str, Any]]:
    """The mappings of a JSON list (anything else: empty)."""
    return _records(value)


def plain(value: Any) -> str:
    """A value as one plain string: `-` for None, strings as they are, else compact JSON."""
    return _plain(value)


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
