"""`pi-workflows run fork|upgrade`: start a new run from one node of an old one, and let a
parked run continue on the workflow's changed code.

Added to the `run` group by `runs._RunGroup` when one of them runs (or its help lists them).
"""

from __future__ import annotations

from typing import Any

import click

from pi_workflows.cli.lineage_text import fork_lines, upgrade_lines
from pi_workflows.cli.options import JsonValue, json_option, make_client
from pi_workflows.cli.output import plain, print_json

__all__ = ["fork", "upgrade"]


@click.command("fork")
@click.argument("run_id")
@click.option("--from", "node_id", required=True, help="The node the fork starts at.")
@click.option(
    "--visit",
    type=click.IntRange(min=1),
    help="Which visit of the node (1 is its first; default: the latest).",
)
@click.option(
    "--input",
    "run_input",
    type=JsonValue(),
    default=None,
    help="A new input as JSON (or @FILE, or - for stdin); default: the source run's. The"
    " carried outputs stay as they were.",
)
@click.option("--idempotency-key", help="Key that makes a repeated fork return the same run.")
@json_option
@click.pass_context
def fork(
    ctx: click.Context,
    run_id: str,
    node_id: str,
    visit: int | None,
    run_input: Any,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Start a new run at a node of RUN_ID, on the workflow's code as it is now.

    The fork keeps the outputs and results of everything RUN_ID finished before that visit
    of the node, and the effects those steps settled (as receipts: they never apply again).
    The node and everything after it run again in the fork; their managed effects are new
    effects of the fork, listed when it starts. RUN_ID must not be running (pause it first)
    and must have no effect applying or ambiguous.

    \b
    Example:
      pi-workflows run fork run_123 --from review --visit 2
    """
    receipt = make_client(ctx).fork(
        run_id, node_id, visit=visit, input=run_input, idempotency_key=idempotency_key
    )
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    for line in fork_lines(receipt.body):
        click.echo(line)
    if receipt.adopted:
        click.echo("(forked before with this key; receipt adopted)")
    click.echo(f"follow it: pi-workflows run show {plain(receipt.get('runId'))}")


@click.command("upgrade")
@click.argument("run_id")
@click.option("--dry-run", is_flag=True, help="Only say what would change.")
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def upgrade(
    ctx: click.Context, run_id: str, dry_run: bool, idempotency_key: str | None, as_json: bool
) -> None:
    """Let a paused or waiting run continue on its workflow's code as it is now.

    Refused, with the reasons, when the new graph cannot carry the run: the node it waits
    at or resumes at is gone, or a node with a recorded result is gone or changed kind. An
    open step is presented again from the new code. A run parked because its code changed
    continues; one paused by a person stays paused.

    \b
    Example:
      pi-workflows run upgrade run_123 --dry-run
    """
    receipt = make_client(ctx).upgrade(run_id, dry_run=dry_run, idempotency_key=idempotency_key)
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    if dry_run:
        verdict = "can be upgraded" if receipt.get("possible") else "cannot be upgraded"
        click.echo(f"run {run_id} ({plain(receipt.get('status'))}) {verdict}:")
    else:
        note = " (done earlier by this command; receipt adopted)" if receipt.adopted else ""
        click.echo(f"run {run_id} upgraded, now {plain(receipt.get('status'))}{note}:")
    for line in upgrade_lines(receipt.body):
        click.echo(f"  {line}")
