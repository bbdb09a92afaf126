"""`pi-workflows session show`: what an origin session is presenting now."""

from __future__ import annotations

import click

from pi_workflows.cli.options import json_option, make_client
from pi_workflows.cli.output import print_json
from pi_workflows.cli.show import delivery_text

__all__ = ["session"]


@click.group()
def session() -> None:
    """Inspect origin sessions (the Pi sessions that present their runs' steps).

    \b
    Example:
      pi-workflows session show 7f3c2a --json
    """


@session.command("show")
@click.argument("session_id")
@json_option
@click.pass_context
def show(ctx: click.Context, session_id: str, as_json: bool) -> None:
    """Show SESSION_ID's view: its active request, the messages it has yet to add, its runs.

    \b
    Example:
      pi-workflows session show 7f3c2a
    """
    view = make_client(ctx).get_session(session_id)
    if as_json:
        print_json(view)
        return
    epoch = view.get("coordinatorEpoch")
    click.echo(f"session {session_id} (coordinator epoch {epoch if epoch else 'none'})")
    active = view.get("activeRequest")
    if isinstance(active, dict):
        click.echo(
            f"active request {active['requestId']}: {active['kind']} of run {active['runId']}"
            f" ({active['status']}; message {active.get('messageStatus') or 'none'})"
        )
        delivered = delivery_text(active.get("delivery"))
        if delivered is not None:
            click.echo(f"delivery: {delivered.plain}")
    else:
        click.echo("no active request")
    messages = view.get("messages") or []
    click.echo(f"{len(messages)} message(s) to add")
    for message in messages:
        first = str(message.get("text", "")).splitlines()[:1] or [""]
        click.echo(f"  {message['workflowMessageId']}  {message['kind']}  {first[0][:60]}")
    for run in view.get("runs") or []:
        click.echo(f"run {run['runId']}  {run['workflow']}  {run['status']}")
