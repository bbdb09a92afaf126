"""`pi-workflows run fork|retry|upgrade`: start a new run from one node of an old one (or
from the node whose failure ended it), and let a parked run continue on the workflow's
changed code.

Added to the `run` group by `runs._RunGroup` when one of them runs (or its help lists them).
"""

from __future__ import annotations

from typing import Any

import click

from pi_workflows.cli.errors import EXIT_FAILURE
from pi_workflows.cli.lineage_text import fork_lines, upgrade_lines
from pi_workflows.cli.options import JsonValue, NodeOutput, json_option, make_client
from pi_workflows.cli.output import plain, print_json
from pi_workflows.client import Receipt

__all__ = ["fork", "retry", "upgrade"]


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
@click.option(
    "--set",
    "outputs",
    type=NodeOutput(),
    multiple=True,
    help="Replace the carried output of NODE (one run before --from) with JSON (or @FILE);"
    " checked by the node's output contract. Repeatable.",
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
    outputs: tuple[tuple[str, Any], ...],
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Start a new run at a node of RUN_ID, on the workflow's code as it is now.

    The fork keeps the outputs and results of everything RUN_ID finished before that visit
    of the node, and the effects those steps settled (as receipts: they never apply again).
    The node and everything after it run again in the fork; their managed effects are new
    effects of the fork, listed when it starts. RUN_ID must not be running (pause it first)
    and must have no effect applying or ambiguous. `--set NODE=JSON` replaces a carried
    node's output (checked by its output contract; recorded as set by a person).

    \b
    Example:
      pi-workflows run fork run_123 --from review --visit 2
      pi-workflows run fork run_123 --from apply --set classify='{"route": "fix"}'
    """
    named = [node for node, _ in outputs]
    twice = sorted({node for node in named if named.count(node) > 1})
    if twice:
        raise click.BadParameter(f"node {twice[0]} is set twice", param_hint="'--set'")
    receipt = make_client(ctx).fork(
        run_id,
        node_id,
        visit=visit,
        input=run_input,
        idempotency_key=idempotency_key,
        outputs=dict(outputs) or None,
    )
    _print_fork(receipt, as_json, "forked")


def _print_fork(receipt: Receipt, as_json: bool, done: str) -> None:
    """A fork's receipt (``run fork``, ``run retry``): JSON, or its lines and where to
    follow it; ``done`` says what an adopted receipt did before."""
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    for line in fork_lines(receipt.body):
        click.echo(line)
    if receipt.adopted:
        click.echo(f"({done} before with this key; receipt adopted)")
    click.echo(f"follow it: pi-workflows run show {plain(receipt.get('runId'))}")


@click.command("retry")
@click.argument("run_id")
@click.option("--idempotency-key", help="Key that makes a repeated retry return the same run.")
@json_option
@click.pass_context
def retry(ctx: click.Context, run_id: str, idempotency_key: str | None, as_json: bool) -> None:
    """Run a failed run again from the node whose failure ended it, as a new run.

    One step for `run fork RUN_ID --from NODE --visit N` at the failed visit, with the same
    input, on the workflow's code as it is now: what RUN_ID finished before that visit is
    carried (its effects as receipts), the failed node and everything after it run again.
    Refused for a run that did not fail (the line says what to use instead).

    \b
    Example:
      pi-workflows run retry run_123
    """
    receipt = make_client(ctx).retry(run_id, idempotency_key=idempotency_key)
    _print_fork(receipt, as_json, "retried")


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
    continues; one paused by a person stays paused. `--dry-run` exits as the upgrade would:
    1 (after the plan) when it would be refused.

    \b
    Example:
      pi-workflows run upgrade run_123 --dry-run
    """
    receipt = make_client(ctx).upgrade(run_id, dry_run=dry_run, idempotency_key=idempotency_key)
    # A dry run exits as the upgrade would: 1 when it would be refused (scripts gate on it).
    refused = dry_run and not receipt.get("possible")
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        if refused:
            ctx.exit(EXIT_FAILURE)
        return
    if dry_run:
        verdict = "can be upgraded" if receipt.get("possible") else "cannot be upgraded"
        click.echo(f"run {run_id} ({plain(receipt.get('status'))}) {verdict}:")
    else:
        note = " (done earlier by this command; receipt adopted)" if receipt.adopted else ""
        click.echo(f"run {run_id} upgraded, now {plain(receipt.get('status'))}{note}:")
    for line in upgrade_lines(receipt.body):
        click.echo(f"  {line}")
    if refused:
        ctx.exit(EXIT_FAILURE)
