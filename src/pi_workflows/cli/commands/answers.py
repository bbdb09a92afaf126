"""`pi-workflows checkpoint answer` and `decision answer`: answer what a run is waiting on."""

from __future__ import annotations

from typing import Any

import click

from pi_workflows.cli.options import JsonValue, json_option, make_client
from pi_workflows.cli.output import print_json
from pi_workflows.client import Receipt

__all__ = ["checkpoint", "decision"]


@click.group()
def checkpoint() -> None:
    """Answer a run's checkpoint (an ordinary question).

    \b
    Example:
      pi-workflows checkpoint answer run_123 --value '{"answer": "yes"}'
    """


@checkpoint.command("answer")
@click.argument("run_id")
@click.option(
    "--value",
    type=JsonValue(),
    required=True,
    help="The answer as JSON (or @FILE, or - for stdin).",
)
@click.option("--request-id", help="The request to answer (default: the run's pending one).")
@click.option("--idempotency-key", help="Key that makes a repeated answer harmless.")
@json_option
@click.pass_context
def answer_checkpoint(
    ctx: click.Context,
    run_id: str,
    value: Any,
    request_id: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Answer the checkpoint RUN_ID is waiting on with a JSON value.

    \b
    Example:
      pi-workflows checkpoint answer run_123 --value '"ship it"'
    """
    receipt = make_client(ctx).answer_checkpoint(
        run_id, value, request_id, idempotency_key=idempotency_key
    )
    _report(receipt, as_json)


@click.group()
def decision() -> None:
    """Answer a run's human decision (only people answer these).

    \b
    Example:
      pi-workflows decision answer run_123 --choice yes
    """


@decision.command("answer")
@click.argument("run_id")
@click.option("--choice", required=True, help="The id of the chosen option.")
@click.option("--request-id", help="The decision to answer (default: the run's pending one).")
@click.option("--idempotency-key", help="Key that makes a repeated answer harmless.")
@json_option
@click.pass_context
def answer_decision(
    ctx: click.Context,
    run_id: str,
    choice: str,
    request_id: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Choose CHOICE in the human decision RUN_ID is waiting on.

    \b
    Example:
      pi-workflows decision answer run_123 --choice no
    """
    receipt = make_client(ctx).answer_decision(
        run_id, choice, request_id, idempotency_key=idempotency_key
    )
    _report(receipt, as_json)


def _report(receipt: Receipt, as_json: bool) -> None:
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    note = " (already answered by this command earlier)" if receipt.adopted else ""
    click.echo(
        f"answered {receipt.get('requestId', '-')} of run {receipt.get('runId', '-')} "
        f"(revision {receipt.get('revision', receipt.revision)}){note}"
    )
