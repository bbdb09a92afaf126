"""`pi-workflows effect list` and `effect resolve`: see and settle managed side effects."""

from __future__ import annotations

from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from pi_workflows.cli.errors import EXIT_USAGE, CliError
from pi_workflows.cli.options import JsonValue, json_option, make_client
from pi_workflows.cli.output import console, print_json

__all__ = ["effect"]


@click.group()
def effect() -> None:
    """See managed side effects and settle the ambiguous ones.

    \b
    Example:
      pi-workflows effect list run_123
    """


@effect.command("list")
@click.argument("run_id", required=False)
@json_option
@click.pass_context
def list_effects(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """List the effects of RUN_ID (or of every run): key, type, kind, status, attempts.

    \b
    Example:
      pi-workflows effect list --json
    """
    effects = make_client(ctx).list_effects(run_id)
    if as_json:
        print_json({"effects": effects})
        return
    if not effects:
        click.echo("no effects")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("effect", "run", "node", "type", "kind", "status", "attempts"):
        table.add_column(column)
    for item in effects:
        style = "bold red" if item.get("status") == "ambiguous" else ""
        table.add_row(
            str(item.get("effectId")),
            str(item.get("runId")),
            f"{item.get('nodeId')}#{item.get('visit')}",
            str(item.get("type")),
            str(item.get("kind")),
            Text(str(item.get("status")), style=style),
            str(item.get("attempts")),
        )
    console().print(table)


@effect.command("resolve")
@click.argument("effect_id")
@click.option("--applied", "resolution", flag_value="applied", help="It was applied.")
@click.option("--rejected", "resolution", flag_value="rejected", help="It was not applied.")
@click.option(
    "--retry", "resolution", flag_value="retry", help="Run its body again (may duplicate it)."
)
@click.option("--result", type=JsonValue(), default=None, help="With --applied: its result.")
@click.option("--reason", default=None, help="With --rejected: why (becomes the node's error).")
@click.option("--idempotency-key", help="Key that makes a repeated resolution harmless.")
@json_option
@click.pass_context
def resolve(
    ctx: click.Context,
    effect_id: str,
    resolution: str | None,
    result: Any,
    reason: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Settle the ambiguous effect EFFECT_ID; then `run resume` continues its run.

    Exactly one of --applied (optionally with --result JSON, the node's output), --rejected
    --reason TEXT (the node fails with it) or --retry (the body runs again: a duplicate is
    possible).

    \b
    Example:
      pi-workflows effect resolve eff_123 --applied --result '{"ticket": 42}'
    """
    if resolution is None:
        raise CliError("choose one of --applied, --rejected or --retry", exit_code=EXIT_USAGE)
    if resolution == "rejected" and not reason:
        raise CliError("--rejected needs --reason TEXT", exit_code=EXIT_USAGE)
    if result is not None and resolution != "applied":
        raise CliError("--result goes only with --applied", exit_code=EXIT_USAGE)
    if resolution == "retry":
        click.echo(
            "warning: --retry runs the effect's body again; if it had been applied, it will be "
            "applied twice",
            err=True,
        )
    receipt = make_client(ctx).resolve_effect(
        effect_id, resolution, result=result, reason=reason, idempotency_key=idempotency_key
    )
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    click.echo(
        f"effect {effect_id} resolved as {resolution}; continue the run with "
        f"'pi-workflows run resume {receipt.get('runId', '')}'"
    )
