"""`pi-workflows watch [RUN_ID]`: the live terminal view (Textual, imported only here)."""

from __future__ import annotations

import click

from pi_workflows.cli.options import RUN_STATUSES, cli_state, make_client

__all__ = ["watch"]


@click.command("watch")
@click.argument("run_id", required=False)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(RUN_STATUSES),
    help="In the run list: only runs with this status (repeat for several).",
)
@click.option("--workflow", help="In the run list: only runs of this workflow.")
@click.pass_context
def watch(
    ctx: click.Context, run_id: str | None, statuses: tuple[str, ...], workflow: str | None
) -> None:
    """Follow runs live in the terminal: the run list, or RUN_ID with its graph.

    Everything shown is pushed by the server as it changes. Keys on a run: p pause,
    r resume, c cancel (asks first), a answer its checkpoint, d decide its human decision
    (asks first), escape back to the list, q quit. In the list: enter opens a run.

    \b
    Example:
      pi-workflows watch run_123
    """
    client = make_client(ctx)
    client.connect()  # start a server now, so problems are one line before the screen opens
    if run_id is not None:
        client.get_run(run_id)  # an unknown run is an error line, not an empty screen
    # Imported here: only this command needs Textual, and every other command stays fast.
    from pi_workflows.cli.watch_app import WatchApp  # noqa: PLC0415

    WatchApp(
        cli_state(ctx).home, run_id=run_id, statuses=list(statuses) or None, workflow=workflow
    ).run()
