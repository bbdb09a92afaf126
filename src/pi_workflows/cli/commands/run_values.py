"""`pi-workflows run get`: read a value a running run published with `ctx.publish`.

Loaded by the ``run`` group only when the command runs (``runs._RunGroup``).
"""

from __future__ import annotations

import json

import click

from pi_workflows.cli.json_output import print_json
from pi_workflows.cli.options import Duration, json_option, make_client

__all__ = ["get"]


@click.command("get")
@click.argument("run_id")
@click.argument("key")
@click.option(
    "--wait",
    "wait_ms",
    type=Duration(),
    default=None,
    help="Wait this long for the key to be published (30s, 5m, ...); default: do not wait.",
)
@json_option
@click.pass_context
def get(ctx: click.Context, run_id: str, key: str, wait_ms: int | None, as_json: bool) -> None:
    """Print the latest value RUN_ID published under KEY (ctx.publish) as JSON.

    With --wait, wait for the key to appear (the server tells the command when the run
    publishes; nothing polls). Exits 1 with one line when the key was not published by
    then, when the run ended without it, or when there is no such run.

    \b
    Example:
      pi-workflows run get run_123 report-url --wait 30s
    """
    client = make_client(ctx)
    found = client.published_value(run_id, key, wait=None if wait_ms is None else wait_ms / 1000)
    if as_json:
        print_json(found)
        return
    click.echo(json.dumps(found.get("value"), ensure_ascii=False, indent=2))
