"""`pi-workflows schedule add|list|show|pause|resume|delete`: durable schedules
(`trigger` and `backfill` live in `schedule_fires.py`).

A schedule is server state: the server starts a run of its workflow at every fire time, but
only while a server runs; `schedule add` says so, and that the server is running now (the
client started it if it was not). Tables for people, `--json` for programs (the server's
`Schedule` and `ScheduleFire` shapes, docs/protocol.md). Every field is checked by the
server; a bad one is refused with one line and nothing is stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import click
from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from pi_workflows.cli.commands.schedule_fires import backfill, trigger
from pi_workflows.cli.options import (
    JsonValue,
    env_option,
    json_option,
    make_client,
    project_option,
)
from pi_workflows.cli.output import console, format_time, plain, print_json, records, whole_width
from pi_workflows.client import Receipt

__all__ = ["schedule"]

SERVER_NOTE: Final = (
    "schedules fire only while the pi-workflows server runs; it is running now (pid {pid})."
    " No operating-system service is installed: after a reboot or 'pi-workflows server stop',"
    " run 'pi-workflows server start' (or any pi-workflows command) so that it fires again"
)
"""What `schedule add` tells the user about the server (docs/server.md, Schedules)."""

DETAIL_MIN_WIDTH: Final = 24
"""Narrowest the detail column of the fires table may get before details move below it."""

_GAP: Final = 3  # characters between two columns of a `SIMPLE_HEAD` table

_OUTCOME_STYLES: Final = {
    "started": "green",
    "queued": "cyan",
    "skipped": "yellow",
    "missed": "yellow",
    "failed": "red",
}


@click.group()
def schedule() -> None:
    """Start runs on a cadence: add, list, show, pause, resume and delete schedules.

    Schedules fire only while the server runs (it is started on demand; no OS service).

    \b
    Example:
      pi-workflows schedule add nightly triage --cron "0 2 * * *" --input '{"items": []}'
    """


@schedule.command("add")
@click.argument("name")
@click.argument("workflow")
@click.option("--every", help="Fire every DURATION: 30s, 5m, 1h30m, 2d (at least 1s).")
@click.option(
    "--cron",
    "cron",
    metavar="EXPR",
    help='Fire at the times of a cron expression, e.g. "0 9 * * 1-5".',
)
@click.option(
    "--input",
    "input_value",
    type=JsonValue(),
    default=None,
    help="Each run's input as JSON (or @FILE, or - for stdin). Default: {}.",
)
@click.option(
    "--timezone",
    metavar="TZ",
    help="IANA zone the cron expression is read in (default: this machine's zone, else UTC).",
)
@click.option(
    "--overlap",
    type=click.Choice(["skip", "queue", "allow"]),
    default="skip",
    show_default=True,
    help="A fire while the previous run is active: skip it, queue it, or start anyway.",
)
@click.option(
    "--catchup",
    type=click.Choice(["latest", "all", "none"]),
    default="latest",
    show_default=True,
    help="Fire times missed while no server ran: fire the latest, all, or none.",
)
@project_option
@env_option
@click.option("--idempotency-key", help="Key that makes a repeated add return the same schedule.")
@json_option
@click.pass_context
def add(
    ctx: click.Context,
    name: str,
    workflow: str,
    every: str | None,
    cron: str | None,
    input_value: Any,
    timezone: str | None,
    overlap: str,
    catchup: str,
    project: Path | None,
    env_items: tuple[tuple[str, str], ...],
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Add the schedule NAME: start WORKFLOW (a name, builtin:NAME or a path) at every fire
    time, given by exactly one of --every and --cron.

    The workflow is resolved once with the input, so a workflow that does not load or an
    input it refuses is refused now, and nothing is stored. Every run it starts gets the
    environment recorded now, as 'run start' records one (--env adds variables).

    \b
    Example:
      pi-workflows schedule add hourly-sync sync --every 1h --overlap queue
    """
    if (every is None) == (cron is None):
        raise click.UsageError("give exactly one of --every DURATION and --cron EXPR")
    receipt = make_client(ctx).add_schedule(
        name,
        workflow,
        every=every,
        cron=cron,
        input=input_value,
        timezone=timezone,
        overlap=overlap,
        catchup=catchup,
        project=project,
        idempotency_key=idempotency_key,
        env=dict(env_items),
    )
    note = SERVER_NOTE.format(pid=receipt.get("serverPid", "?"))
    added = dict(receipt.get("schedule") or {})
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted, "note": note})
        return
    again = " (done earlier by this command; receipt adopted)" if receipt.adopted else ""
    click.echo(
        f"schedule {plain(added.get('name'))} added: {plain(added.get('workflow'))}"
        f" {plain(added.get('cadence'))}, overlap {plain(added.get('overlap'))},"
        f" catchup {plain(added.get('catchup'))}{again}"
    )
    click.echo(f"next fire: {format_time(added.get('nextFireAt'))}")
    click.echo(f"note: {note}")


@schedule.command("list")
@click.option("--all", "every", is_flag=True, help="Also the deleted schedules.")
@json_option
@click.pass_context
def list_schedules(ctx: click.Context, every: bool, as_json: bool) -> None:
    """List schedules by name: status, workflow, cadence, next fire and the last fire.

    \b
    Example:
      pi-workflows schedule list --json
    """
    found = make_client(ctx).list_schedules(include_deleted=every)
    if as_json:
        print_json({"schedules": found})
        return
    console().print(render_schedules(found))


@schedule.command("show")
@click.argument("name")
@click.option(
    "--fires",
    type=click.IntRange(min=1, max=100),
    default=20,
    show_default=True,
    help="How many of the newest fires to list (1-100).",
)
@json_option
@click.pass_context
def show(ctx: click.Context, name: str, fires: int, as_json: bool) -> None:
    """Show the schedule NAME (or a schedule id, deleted ones too) and its newest fires,
    each with its outcome and the run it started. A name no schedule has any more shows
    the newest deleted schedule of that name, saying it was deleted.

    \b
    Example:
      pi-workflows schedule show nightly --fires 50
    """
    found = make_client(ctx).get_schedule(name, fires=fires)
    if as_json:
        print_json(found)
        return
    console().print(render_schedule(found.get("schedule") or {}, records(found.get("fires"))))


def _changed(receipt: Receipt, as_json: bool) -> None:
    changed = dict(receipt.get("schedule") or {})
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    again = " (done earlier by this command; receipt adopted)" if receipt.adopted else ""
    after = ""
    if changed.get("status") == "active":
        after = f", next fire {format_time(changed.get('nextFireAt'))}"
    click.echo(
        f"schedule {plain(changed.get('name'))}: {plain(changed.get('status'))}{after}{again}"
    )


@schedule.command("pause")
@click.argument("name")
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def pause(ctx: click.Context, name: str, idempotency_key: str | None, as_json: bool) -> None:
    """Pause the schedule NAME: it fires nothing until resumed (its runs go on).

    \b
    Example:
      pi-workflows schedule pause nightly
    """
    _changed(make_client(ctx).pause_schedule(name, idempotency_key=idempotency_key), as_json)


@schedule.command("resume")
@click.argument("name")
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def resume(ctx: click.Context, name: str, idempotency_key: str | None, as_json: bool) -> None:
    """Resume the schedule NAME from its next fire time after now (the times that passed
    while it was paused are not caught up).

    \b
    Example:
      pi-workflows schedule resume nightly
    """
    _changed(make_client(ctx).resume_schedule(name, idempotency_key=idempotency_key), as_json)


@schedule.command("delete")
@click.argument("name")
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def delete(ctx: click.Context, name: str, idempotency_key: str | None, as_json: bool) -> None:
    """Delete the schedule NAME: it never fires again and the name is free. Its runs go on
    and keep showing it (`run show`, `run list --schedule NAME`).

    \b
    Example:
      pi-workflows schedule delete nightly
    """
    _changed(make_client(ctx).delete_schedule(name, idempotency_key=idempotency_key), as_json)


# --- rendering --------------------------------------------------------------------------------


def _fire_text(fire: Any) -> Text:
    if not isinstance(fire, Mapping):
        return Text("-")
    outcome = plain(fire.get("outcome"))
    shown = Text(f"{format_time(fire.get('fireAt'), short=True)} ")
    shown.append(outcome, style=_OUTCOME_STYLES.get(outcome, ""))
    return shown


def render_schedules(found: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`schedule list`: one row per schedule."""
    if not found:
        return Text("no schedules")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    whole = {
        "name": whole_width("name", (item.get("name") for item in found)),
        "status": whole_width("status", (item.get("status") for item in found)),
        "next fire": 11,
    }
    for column in ("name", "status", "workflow", "cadence", "next fire", "last fire"):
        if column in whole:
            table.add_column(column, no_wrap=True, min_width=whole[column])
        else:
            table.add_column(column, overflow="fold")
    for item in found:
        table.add_row(
            Text(plain(item.get("name"))),
            Text(plain(item.get("status"))),
            Text(plain(item.get("workflow"))),
            Text(plain(item.get("cadence"))),
            Text(format_time(item.get("nextFireAt"), short=True)),
            _fire_text(item.get("lastFire")),
        )
    return table


def render_schedule(item: Mapping[str, Any], fires: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`schedule show`: the schedule's fields, then its fires, newest first."""
    fields = Table(box=None, show_header=False, pad_edge=False)
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column(overflow="fold")
    for label, key in (
        ("schedule", "name"),
        ("id", "scheduleId"),
        ("status", "status"),
        ("workflow", "workflow"),
        ("as given", "workflowSpec"),
        ("project", "projectDir"),
        ("cadence", "cadence"),
        ("overlap", "overlap"),
        ("catchup", "catchup"),
    ):
        fields.add_row(label, Text(plain(item.get(key))))
    fields.add_row("next fire", Text(format_time(item.get("nextFireAt"))))
    fields.add_row("queued", Text(plain(item.get("queued"))))
    shown = plain(item.get("input"))
    fields.add_row("input", Text(shown if len(shown) <= 500 else shown[:499] + "…"))
    fields.add_row("added", Text(format_time(item.get("createdAt"))))
    if item.get("deletedAt") is not None:
        fields.add_row("deleted", Text(format_time(item.get("deletedAt"))))
    parts: list[RenderableType] = [fields]
    if item.get("deletedAt") is not None:
        name = plain(item.get("name"))
        parts.append(
            Text(
                f"this schedule was deleted; the runs it started: pi-workflows run list"
                f" --schedule {name}",
                style="yellow",
            )
        )
    parts.append(_Fires(fires) if fires else Text("no fires yet"))
    return Group(*parts)


class _Fires:
    """The fires table, laid out for the width it is printed at: times, outcomes, run ids
    and statuses are never cut; the detail takes the rest of the line and wraps in it, or,
    when less than `DETAIL_MIN_WIDTH` is left (80 columns, piped), is listed under the
    table, one whole line per fire that has one."""

    def __init__(self, fires: Sequence[Mapping[str, Any]]) -> None:
        self.fires = fires

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        whole: list[tuple[str, list[str]]] = [
            ("fire time", [format_time(f.get("fireAt")) for f in self.fires]),
            ("outcome", [plain(f.get("outcome")) for f in self.fires]),
            ("run", [plain(f.get("runId")) for f in self.fires]),
            ("run status", [plain(f.get("runStatus")) for f in self.fires]),
        ]
        widths = [whole_width(column, values) for column, values in whole]
        left = options.max_width - sum(widths) - _GAP * len(widths)
        details = [plain(f.get("detail")) if f.get("detail") else "" for f in self.fires]
        inline = left >= DETAIL_MIN_WIDTH or not any(details)
        table = Table(
            title="Fires (newest first)", title_justify="left", box=box.SIMPLE_HEAD,
            show_edge=False, pad_edge=False,
        )  # fmt: skip
        for (column, _), width in zip(whole, widths, strict=True):
            table.add_column(column, no_wrap=True, min_width=width)
        if inline:
            table.add_column("detail", overflow="fold")
        for index in range(len(self.fires)):
            outcome = whole[1][1][index]
            cells = [
                Text(whole[0][1][index]),
                Text(outcome, style=_OUTCOME_STYLES.get(outcome, "")),
                Text(whole[2][1][index]),
                Text(whole[3][1][index]),
            ]
            table.add_row(*cells, *([Text(details[index])] if inline else []))
        yield table
        if not inline:
            for index, detail in enumerate(details):
                if detail:
                    yield Text(f"{whole[0][1][index]} {whole[1][1][index]}: {detail}")


schedule.add_command(trigger)
schedule.add_command(backfill)
