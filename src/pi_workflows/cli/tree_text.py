"""How `run show` prints a run's place in its tree: every join with its children's exact
counts by status, the runs below that need a person, and the detached runs below whose steps
a headless agent works on. Pure rendering; runs in the CLI process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from pi_workflows.cli.output import counts_text, plain, records, status_text

__all__ = ["tree_parts"]


def _table(title: str) -> Table:
    return Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False
    )


def _fields() -> Table:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    return table


_ENDED_BADLY: Final = frozenset({"failed", "timed_out", "cancelled", "ambiguous", "paused"})
"""Children of an earlier join that `run show` still lists: the ones that did not complete."""


def _join_title(join: Mapping[str, Any]) -> str:
    counts = join.get("counts")
    if isinstance(counts, Mapping):
        tally = f"{counts_text(counts)} of {plain(join.get('total'))}"
    else:  # a server without counts
        tally = f"{plain(join.get('ended'))}/{plain(join.get('total'))} ended"
    return (
        f"Children of {plain(join.get('nodeId'))} ({plain(join.get('kind'))} of"
        f" {plain(join.get('workflow'))}): {tally}; {plain(join.get('status'))}"
    )


def _join_table(join: Mapping[str, Any], listed: Sequence[Mapping[str, Any]]) -> Table:
    table = _table(_join_title(join))
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column(
        "run", no_wrap=True, min_width=max([3, *(len(plain(c.get("runId"))) for c in listed)])
    )
    table.add_column(
        "status", no_wrap=True, min_width=max([6, *(len(plain(c.get("status"))) for c in listed)])
    )
    table.add_column("node", overflow="fold")
    for child in listed:
        table.add_row(
            Text(plain(child.get("item"))),
            Text(plain(child.get("runId") or "-")),
            status_text(child.get("status")),
            Text(plain(child.get("currentNode") or "")),
        )
    return table


def tree_parts(view: Mapping[str, Any]) -> list[RenderableType]:
    """Every join of the run the view carries, newest last: the newest with all its children
    in item order, each earlier one with its exact counts and the children that did not
    complete (the others: `run list --lineage RUN`); the joins left out counted; then the
    runs below that need a person and the detached ones a headless agent works on (or
    waits for), each with the command that shows it."""
    parts: list[RenderableType] = []
    run_id = plain(view.get("runId"))
    joins = records(view.get("joins"))
    omitted_joins = view.get("joinsOmitted")
    if isinstance(omitted_joins, int) and omitted_joins:
        parts.append(
            Text(
                f"({omitted_joins} earlier joins not shown: pi-workflows run list --lineage"
                f" {run_id})",
                style="dim",
            )
        )
    for index, join in enumerate(joins):
        newest = index == len(joins) - 1
        children = records(join.get("children"))
        listed = children if newest else [c for c in children if c.get("status") in _ENDED_BADLY]
        if listed:
            parts.append(_join_table(join, listed))
        else:
            parts.append(Text(_join_title(join), style="italic"))
        omitted = join.get("childrenOmitted")
        hidden = (omitted if isinstance(omitted, int) else 0) + len(children) - len(listed)
        if hidden:
            parts.append(
                Text(f"({hidden} more children: pi-workflows run list --lineage {run_id})",
                     style="dim")
            )  # fmt: skip
    needing = records(view.get("needsPerson"))
    if needing:
        fields = _fields()
        for run in needing:
            why = run.get("waitingOn")
            reason = (
                f"waits on {plain(why.get('kind'))} {plain(why.get('nodeId'))}"
                if isinstance(why, Mapping)
                else f"{plain(run.get('status'))} ({plain(run.get('parkReason'))})"
            )
            fields.add_row(
                Text(plain(run.get("runId")), style="yellow"),
                Text(f"{reason}: pi-workflows run show {plain(run.get('runId'))}"),
            )
        parts.extend([Text("Child runs that need a person", style="bold yellow"), fields])
    working = records(view.get("agentWork"))
    if working:
        fields = _fields()
        for run in working:
            why = run.get("waitingOn") if isinstance(run.get("waitingOn"), Mapping) else {}
            assert isinstance(why, Mapping)
            doing = (
                "a headless agent works on"
                if run.get("agent") == "working"
                else "waits for an agent place for"
            )
            fields.add_row(
                Text(plain(run.get("runId"))),
                Text(f"{doing} {plain(why.get('kind'))} {plain(why.get('nodeId'))}"),
            )
        parts.extend([Text("Child runs with agent work (detached)", style="bold"), fields])
    return parts
