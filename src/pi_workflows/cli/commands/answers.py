"""Answering what a run waits on: `checkpoint answer`, `decision answer`, and
`interaction submit|list` (agent, assistant-message and checkpoint steps).

A checkpoint answer or a submission is validated by the node's `validate` in a runner the
server supervises; the command waits for that outcome and exits 1 with the validation
message on one line when it was rejected.
"""

from __future__ import annotations

from typing import Any

import click

from pi_workflows.cli.errors import CliError
from pi_workflows.cli.options import JsonValue, json_option, make_client
from pi_workflows.cli.output import format_time, print_json
from pi_workflows.cli.requests import request_rows
from pi_workflows.client import Receipt

__all__ = ["checkpoint", "decision", "interaction"]

CHILD_HELP = "The child run (below RUN_ID) whose question to answer, when several wait."


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
@click.option("--child", "child", metavar="RUN", help=CHILD_HELP)
@click.option("--idempotency-key", help="Key that makes a repeated answer harmless.")
@json_option
@click.pass_context
def answer_checkpoint(
    ctx: click.Context,
    run_id: str,
    value: Any,
    request_id: str | None,
    child: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Answer the checkpoint RUN_ID is waiting on with a JSON value.

    The answer is validated first (the node's validate, in a runner); a rejected answer
    prints the reason and exits 1, and the question stays open. A run that waits on its
    child runs: the answer goes to the one child run that waits on a checkpoint (--child
    picks one when several do; the refusal names them).

    \b
    Example:
      pi-workflows checkpoint answer run_123 --value '"ship it"'
    """
    receipt = make_client(ctx).answer_checkpoint(
        run_id, value, request_id, idempotency_key=idempotency_key, child=child
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
@click.option("--child", "child", metavar="RUN", help=CHILD_HELP)
@click.option("--idempotency-key", help="Key that makes a repeated answer harmless.")
@json_option
@click.pass_context
def answer_decision(
    ctx: click.Context,
    run_id: str,
    choice: str,
    request_id: str | None,
    child: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Choose CHOICE in the human decision RUN_ID is waiting on (or, for a run that waits
    on its child runs, in the one child run's decision; --child picks one of several).

    \b
    Example:
      pi-workflows decision answer run_123 --choice no
    """
    receipt = make_client(ctx).answer_decision(
        run_id, choice, request_id, idempotency_key=idempotency_key, child=child
    )
    _report(receipt, as_json)


@click.group()
def interaction() -> None:
    """List open steps and submit their outputs (agent, assistant-message, checkpoint).

    \b
    Example:
      pi-workflows interaction submit run_123 --output '{"route": "fix"}'
    """


@interaction.command("list")
@click.option("--session", "session_id", help="Only the requests of this origin session.")
@json_option
@click.pass_context
def list_interactions(ctx: click.Context, session_id: str | None, as_json: bool) -> None:
    """List the open requests, oldest first: request, run, step, kind and status, then,
    indented, what each asks (an agent step's prompt and expected output, every key of a
    checkpoint's request, a decision's choices) and its deadline.

    \b
    Example:
      pi-workflows interaction list --session 7f3c --json
    """
    found = make_client(ctx).list_interactions(session_id)
    if as_json:
        print_json({"interactions": found})
        return
    if not found:
        click.echo("no open requests")
    for item in found:
        click.echo(
            f"{item['requestId']}  run {item['runId']}  {item['workflow']}/{item['nodeId']}"
            f"  {item['kind']}  {item['status']}"
        )
        rows = request_rows(item.get("kind"), item.get("request"))
        if item.get("deadlineAt") is not None:
            rows.append(("deadline", format_time(item["deadlineAt"])))
        width = max((len(label) for label, _ in rows), default=0)
        for label, text in rows:
            lines = text.splitlines() or [""]
            click.echo(f"  {label:<{width}}  {lines[0]}")
            for line in lines[1:]:
                click.echo(f"  {'':<{width}}  {line}")


@interaction.command("submit")
@click.argument("run_id")
@click.option(
    "--output",
    type=JsonValue(),
    required=True,
    help="The step's output as JSON (or @FILE, or - for stdin).",
)
@click.option("--request-id", help="The request to submit to (default: the run's open one).")
@click.option("--idempotency-key", help="Key that makes a repeated submission harmless.")
@json_option
@click.pass_context
def submit(
    ctx: click.Context,
    run_id: str,
    output: Any,
    request_id: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Submit OUTPUT for the step RUN_ID waits on and wait for its validation.

    A rejected submission prints the validation message and exits 1; the step stays open
    for a corrected one. Human decisions are answered with `decision answer` instead.

    \b
    Example:
      pi-workflows interaction submit run_123 --output '{"route": "fix", "reason": "typo"}'
    """
    client = make_client(ctx)
    if request_id is None:
        waiting = client.get_run(run_id).get("waitingOn")
        if not isinstance(waiting, dict):
            raise CliError(f"run {run_id} is not waiting on a step; see 'pi-workflows run show'")
        request_id = str(waiting["requestId"])
    receipt = client.submit(request_id, output, run_id=run_id, idempotency_key=idempotency_key)
    _report(receipt, as_json)


def _report(receipt: Receipt, as_json: bool) -> None:
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    note = " (already answered by this command earlier)" if receipt.adopted else ""
    status = receipt.get("status")
    verb = "still validating" if status == "validating" else "answered"
    via = f" (below run {receipt.get('via')})" if receipt.get("via") else ""
    click.echo(
        f"{verb} {receipt.get('requestId', '-')} of run {receipt.get('runId', '-')}{via} "
        f"(revision {receipt.get('revision', receipt.revision)}){note}"
    )
