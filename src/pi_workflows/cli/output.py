"""Printing results: stable JSON for `--json`, rich tables for people.

Owns the renderers of server data (run lists, workflows, status, problems; one run is
`show.py`, history and logs `timeline.py`) and their shared helpers. Text
that came from the server or from workflows is always wrapped in `rich.text.Text`, so it is
never interpreted as rich markup and control characters are stripped. JSON output
(`print_json`, `plain`: `json_output.py`, re-exported here) is the server's camelCase data
with sorted keys, two-space indents and a trailing newline, printed without rich. This
module never contacts a server and never prints secrets (the protocol carries none).
"""

from __future__ import annotations

import datetime as dt
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from pi_workflows.cli.json_output import plain, print_json

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
    "run_list_layout",
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
    "retried": "yellow",
    "exhausted": "red",
    "pending": "yellow",
    "consumed": "green",
    "rejected": "red",
}


def console() -> Console:
    """A console on the current stdout (looked up at print time, so tests can capture it)."""
    return Console(highlight=False)


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


RUN_LIST_MIN_FREE: Final = 12
"""Narrowest the workflow column of `run list` may get; below it, workflow and node go."""

_GAP: Final = 3  # characters between two columns of a `SIMPLE_HEAD` table without edges


RunListLayout = Literal["wide", "stacked", "narrow"]


def run_list_layout(runs: Sequence[Mapping[str, Any]], width: int) -> RunListLayout:
    """How `run list` fits `width` columns, ids, statuses and times always whole:

    - `wide`: run, workflow, status, node, updated, each on one line;
    - `stacked`: the node moves under the workflow (`↳ node`), both wrapping in the
      column left between the id and the status;
    - `narrow`: only run, status and updated (when that column would be narrower than
      `RUN_LIST_MIN_FREE`); a note says so.
    """
    fixed = sum(_run_list_widths(runs)[key] for key in ("run", "status", "updated"))
    names = max((len(_plain(run.get("workflow"))) for run in runs), default=0)
    nodes = max((len(_plain(run.get("currentNode"))) for run in runs), default=0)
    if fixed + max(names, 8) + max(nodes, 4) + 4 * _GAP <= width:
        return "wide"
    if width - fixed - 3 * _GAP >= RUN_LIST_MIN_FREE:
        return "stacked"
    return "narrow"


def _run_list_widths(runs: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The width of the columns that are never cut: the widest value or the heading."""
    times = [format_time(run.get("updatedAt"), short=True) for run in runs]
    statuses = [len(_plain(run.get("status"))) + len(progress_text(run)) for run in runs]
    return {
        "run": max(
            12 if any(run.get("parentRunId") for run in runs) else 3, _widest(runs, "runId")
        ),
        "status": max([6, *statuses]),
        "updated": max([7, *(len(t) for t in times)]),
    }


class _RunList:
    """`run list`'s table, laid out for the width it is printed at (`run_list_layout`)."""

    def __init__(self, runs: Sequence[Mapping[str, Any]]) -> None:
        self.runs = runs

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        layout = run_list_layout(self.runs, width)
        widths = _run_list_widths(self.runs)
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        # Child runs (`--children`) name their parent under their id: the parent column.
        parents = any(run.get("parentRunId") for run in self.runs)
        table.add_column(
            "run / parent" if parents else "run", no_wrap=True, min_width=widths["run"]
        )
        free = width - sum(widths.values()) - 3 * _GAP
        if layout == "wide":
            table.add_column("workflow", no_wrap=True)
        elif layout == "stacked":
            table.add_column("workflow / node", overflow="fold", width=free)
        table.add_column("status", no_wrap=True, min_width=widths["status"])
        if layout == "wide":
            table.add_column("node", no_wrap=True)
        table.add_column("updated", no_wrap=True, min_width=widths["updated"])
        for run in self.runs:
            cell = Text(_plain(run.get("runId")))
            if run.get("parentRunId"):
                cell.append(f"\n{_plain(run.get('parentRunId'))}", style="dim")
            row = [cell]
            workflow, node = _plain(run.get("workflow")), run.get("currentNode")
            if layout == "stacked":
                cell = Text(_wrap(workflow, free))
                if node is not None:
                    cell.append("\n" + _wrap(f"↳ {_plain(node)}", free), style="dim")
                row.append(cell)
            elif layout == "wide":
                row.append(Text(workflow))
            status = status_text(run.get("status"))
            status.append(progress_text(run), style="dim")
            row.append(status)
            if layout == "wide":
                row.append(Text(_plain(node)))
            row.append(Text(format_time(run.get("updatedAt"), short=True)))
            table.add_row(*row)
        yield table
        if layout == "narrow":
            yield Text(
                f"(workflow and node left out at {width} columns; --json has them)", style="dim"
            )


_ENDINGS: Final = (
    ("failed", "failed"),
    ("timed_out", "timed out"),
    ("cancelled", "cancelled"),
    ("skipped", "skipped"),
    ("ambiguous", "ambiguous"),
)
_STATES: Final = (
    ("completed", "completed"),
    *_ENDINGS,
    ("paused", "paused"),
    ("waiting", "waiting"),
    ("running", "running"),
    ("queued", "queued"),
    ("notStarted", "not started"),
)


def counts_text(counts: Mapping[str, Any]) -> str:
    """A join's children by status, exactly, in a fixed order (`4 completed, 4 cancelled,
    12 not started`); each child is counted once."""
    known = {key for key, _ in _STATES}
    parts = [f"{counts[key]} {words}" for key, words in _STATES if counts.get(key)]
    parts.extend(f"{n} {_plain(key)}" for key, n in counts.items() if key not in known and n)
    return ", ".join(parts) or "none yet"


def progress_text(run: Mapping[str, Any]) -> str:
    """` 3/10 completed` (then `, 1 failed`, `, 2 cancelled`, ... for the children that
    ended otherwise, each counted once) after the status of a parent waiting on its
    children, ` (fork)` after that of a fork, else empty."""
    join = run.get("children")
    if not isinstance(join, Mapping):
        return " (fork)" if run.get("forkedFrom") else ""
    counts = join.get("counts")
    if not isinstance(counts, Mapping):  # a server without counts
        return f" {_plain(join.get('ended'))}/{_plain(join.get('total'))} ended"
    others = "".join(f", {counts[key]} {words}" for key, words in _ENDINGS if counts.get(key))
    return f" {counts.get('completed', 0)}/{_plain(join.get('total'))} completed{others}"


def _wrap(text: str, width: int) -> str:
    """`text` in lines of at most `width` characters, broken after a hyphen where it can be
    (`a-long-` / `name`) and inside a word only where it must; nothing is left out."""
    return "\n".join(textwrap.wrap(text, max(1, width), break_on_hyphens=True)) or text


def render_runs(runs: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`run list`: one row per `RunSummary`; ids, statuses and times are never cut or
    dropped: at the printed width the node moves under the workflow, and below that both
    are left out (`run_list_layout`)."""
    if not runs:
        return Text("no runs")
    return _RunList(runs)


def render_workflows(workflows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`workflows list`: name, origin, what it does (its summary line), path, and the load
    error if any."""
    if not workflows:
        return Text("no workflows found")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("name", no_wrap=True)
    table.add_column("origin", no_wrap=True)
    table.add_column("what it does", overflow="fold")
    table.add_column("path and problems", overflow="fold")
    for workflow in workflows:
        where = Text(_plain(workflow.get("path")))
        for hidden in workflow.get("shadows") or []:
            where.append(f"\nshadows {_plain(hidden)}", style="yellow")
        if workflow.get("error"):
            where.append(f"\nerror: {_plain(workflow.get('error'))}", style="red")
        table.add_row(
            Text(_plain(workflow.get("name"))),
            Text(_plain(workflow.get("origin"))),
            Text(_plain(workflow.get("summary") or "")),
            where,
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
    runs = [len(_plain(problem.get("runId"))) for problem in problems]
    codes = [len(_plain(problem.get("code"))) for problem in problems]
    table.add_column("code", no_wrap=True, min_width=max([4, *codes]))
    table.add_column("run", no_wrap=True, min_width=max([3, *runs]))
    table.add_column("repairable", no_wrap=True)
    table.add_column("message", overflow="fold")
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


def whole_width(header: str, values: Iterable[Any]) -> int:
    """The width a column needs to show ``header`` and every value whole (give it as the
    column's ``min_width``, with ``no_wrap``: an id, a status or a time is never cut)."""
    return max([len(header), *(len(_plain(value)) for value in values)])


def _widest(records: Sequence[Mapping[str, Any]], key: str) -> int:
    return max((len(_plain(record.get(key))) for record in records), default=0)


def records(value: Any) -> list[Mapping[str, Any]]:
    """The mappings of a JSON list (anything else: empty)."""
    return _records(value)


def _records(value: Any) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


_plain = plain
