"""`pi-workflows schedule trigger|backfill`: a person's own fires of a schedule.

`trigger` fires the schedule now, once; `backfill` fires the cadence's past fire times in a
window that have no fire yet. Both follow the schedule's overlap rule and leave its cadence
as it was (docs/cli.md; the server's `store/schedule_manual.py`). Registered on the
`schedule` group by `schedules.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from pi_workflows.cli.options import Since, json_option, make_client
from pi_workflows.cli.output import format_time, plain, print_json
from pi_workflows.client import Receipt

__all__ = ["backfill", "trigger"]


def _fire_line(fire: Mapping[str, Any]) -> str:
    """`2026-12-06 09:00: started run_...` (or skipped/queued/failed with why)."""
    what = plain(fire.get("outcome"))
    if fire.get("runId"):
        what += f" {plain(fire.get('runId'))}"
    if fire.get("detail"):
        what += f" ({plain(fire.get('detail'))})"
    return f"{format_time(fire.get('fireAt'))}: {what}"


@click.command("trigger")
@click.argument("name")
@click.option(
    "--key",
    help="The schedule's trigger key: a trigger of NAME with the same key fires only once.",
)
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def trigger(
    ctx: click.Context, name: str, key: str | None, idempotency_key: str | None, as_json: bool
) -> None:
    """Fire the schedule NAME now, once, as its overlap rule says (skip: not while a run of
    it is active; queue: after that run; allow: at once). Its cadence goes on as before;
    the run's ctx.fire_at is the moment of the trigger.

    \b
    Example:
      pi-workflows schedule trigger nightly --key rerun-2026-12-06
    """
    receipt: Receipt = make_client(ctx).trigger_schedule(
        name, key=key, idempotency_key=idempotency_key
    )
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    fire = dict(receipt.get("fire") or {})
    again = " (triggered before with this key; nothing new)" if receipt.adopted else ""
    click.echo(f"schedule {plain(receipt.get('name'))} fired {_fire_line(fire)}{again}")


@click.command("backfill")
@click.argument("name")
@click.option(
    "--from",
    "start",
    type=Since(),
    required=True,
    help="The window's start: an ISO date/time (local unless it has an offset) or a time ago (3d).",
)
@click.option(
    "--to",
    "end",
    type=Since(),
    required=True,
    help="The window's end (included), in the past: same forms as --from.",
)
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def backfill(
    ctx: click.Context,
    name: str,
    start: int,
    end: int,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Fire the schedule NAME once for each of its fire times from --from to --to that has
    no fire yet (at most 100), oldest first, each as its overlap rule says. Running it again
    starts nothing new; the runs' ctx.fire_at is their fire time.

    \b
    Example:
      pi-workflows schedule backfill nightly --from 2026-12-01 --to 2026-12-05T23:59
    """
    receipt = make_client(ctx).backfill_schedule(name, start, end, idempotency_key=idempotency_key)
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    fires = [dict(fire) for fire in receipt.get("fires") or []]
    already = list(receipt.get("already") or [])
    click.echo(
        f"schedule {plain(receipt.get('name'))}: {receipt.get('total', 0)} fire time(s) in the"
        f" window, {len(fires)} fired now, {len(already)} fired before"
    )
    for fire in fires:
        click.echo(f"  {_fire_line(fire)}")
