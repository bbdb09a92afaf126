"""`pi-workflows ui`: the local web page for runs (`pi_workflows.web`).

Starts the server if needed, makes sure the page process serves this state directory,
prints one line (the address to open, with the access secret) and opens the browser unless
`--no-browser`. Imports only the page's launcher here, never its web framework: the page
runs in a process of its own (docs/ui.md).
"""

from __future__ import annotations

import click

from pi_workflows.cli.errors import CliError
from pi_workflows.cli.options import cli_state, make_client

__all__ = ["ui"]


@click.command("ui")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    help="Serve on this port of 127.0.0.1 (default: the running page's, else a free one).",
)
@click.option("--no-browser", is_flag=True, help="Only print the address; open no browser.")
@click.pass_context
def ui(ctx: click.Context, port: int | None, no_browser: bool) -> None:
    """Serve the web page for runs on 127.0.0.1 and print its address.

    The page lists runs, follows a run live, answers checkpoints and decisions, and pauses,
    resumes, cancels, restarts, forks and upgrades runs, as the CLI does. It keeps being
    served while the server runs. The address holds a secret for this user: do not share
    it.

    \b
    Example:
      pi-workflows ui --no-browser
    """
    # Imported here: only this command needs the page's launcher.
    from pi_workflows.web.errors import WebError  # noqa: PLC0415
    from pi_workflows.web.launcher import ensure_page  # noqa: PLC0415

    hello = make_client(ctx).connect()
    try:
        page = ensure_page(cli_state(ctx).home, port=port, server_epoch=hello.server_epoch)
    except WebError as exc:
        raise CliError(exc.message) from None
    click.echo(page.url)
    if not no_browser:
        import webbrowser  # noqa: PLC0415 - only when a browser is opened

        webbrowser.open(page.url)
