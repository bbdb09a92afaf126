"""`pi-workflows run follow-up` and `run follow-ups`: queue, remove and list the follow-up
prompts sent to a run's origin Pi session after it completes.

Loaded by the ``run`` group only when one of the commands runs (``runs._RunGroup``).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from pi_workflows.cli.json_output import plain, print_json
from pi_workflows.cli.options import json_option, make_client

__all__ = ["follow_up", "follow_ups"]

SHOWN_CHARS = 100
"""Characters of a follow-up's text `run follow-ups` prints (`--json` has 4,096)."""


@click.command("follow-up")
@click.argument("words", nargs=-1, required=True, metavar="RUN_ID | remove RUN_ID ID")
@click.option("--prompt", help="The follow-up's text (at most 65,536 characters; - reads stdin).")
@click.option("--idempotency-key", help="Send the command at most once under this key.")
@json_option
@click.pass_context
def follow_up(
    ctx: click.Context,
    words: tuple[str, ...],
    prompt: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Queue a follow-up prompt on RUN_ID, or remove a queued one.

    Follow-ups are sent in queue order, each exactly once, as user messages to the Pi
    session the run was started from, only after the run completed and its result was
    presented there. A run that fails, times out or is cancelled cancels them (run
    follow-ups lists why). A run with no origin session (started outside Pi, detached, a
    child run) or that has ended refuses them with one line.

    \b
    Example:
      pi-workflows run follow-up run_123 --prompt "Now open a pull request with the fix"
      pi-workflows run follow-up remove run_123 fup_456
    """
    client = make_client(ctx)
    if words[0] == "remove":
        if len(words) != 3 or prompt is not None:
            raise click.UsageError("usage: pi-workflows run follow-up remove RUN_ID ID")
        receipt = client.remove_follow_up(
            words[2], run_id=words[1], idempotency_key=idempotency_key
        )
        if as_json:
            print_json({**receipt.body, "adopted": receipt.adopted})
            return
        click.echo(f"run {words[1]}: follow-up {words[2]} removed")
        return
    if len(words) != 1:
        raise click.UsageError(
            "give one RUN_ID and --prompt TEXT (or: pi-workflows run follow-up remove RUN_ID ID)"
        )
    if prompt is None:
        raise click.UsageError("--prompt TEXT is needed: the follow-up's text")
    if prompt == "-":
        prompt = sys.stdin.read()
    receipt = client.follow_up(words[0], prompt, idempotency_key=idempotency_key)
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    note = " (sent before with this key; receipt adopted)" if receipt.adopted else ""
    click.echo(
        f"run {words[0]}: follow-up {receipt.get('followUpId')} queued as #{receipt.get('seq')};"
        f" it is sent after the run completes and its result is presented{note}"
    )


@click.command("follow-ups")
@click.argument("run_id")
@json_option
@click.pass_context
def follow_ups(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """List RUN_ID's follow-up prompts in queue order, with what became of each.

    \b
    Example:
      pi-workflows run follow-ups run_123
    """
    listed = make_client(ctx).follow_ups(run_id)
    if as_json:
        print_json(listed)
        return
    entries: list[dict[str, Any]] = list(listed.get("followUps") or [])
    if not entries:
        click.echo(f"run {run_id}: no follow-ups")
        return
    click.echo(f"run {run_id} ({plain(listed.get('status'))}): {len(entries)} follow-up(s)")
    for entry in entries:
        text = " ".join(str(entry.get("text", "")).split())
        if len(text) > SHOWN_CHARS:
            text = text[: SHOWN_CHARS - 3] + "..."
        status = str(entry.get("status"))
        if status == "queued":
            status = "queued (sent after the run completes)"
        elif status == "ready":
            status = "being sent"
        elif status == "cancelled":
            status = f"cancelled: {entry.get('reason')}"
        click.echo(f"  #{entry.get('seq')}  {entry.get('followUpId')}  {status}")
        click.echo(f"      {text}")
