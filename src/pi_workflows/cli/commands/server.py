"""`pi-workflows server run|start|status|stop`: run, start, inspect and stop the server.

Only `server run` executes the server in this process (it imports `pi_workflows.server.main`
lazily); the others speak the client protocol. `status` and `stop` never start a server.
"""

from __future__ import annotations

import click

from pi_workflows.cli.errors import EXIT_NO_SERVER, ServerEntryMissingError
from pi_workflows.cli.options import cli_state, json_option, make_client
from pi_workflows.cli.output import console, print_json, render_status
from pi_workflows.client import ServerUnavailableError, ensure_server, socket_path

__all__ = ["server"]


@click.group()
def server() -> None:
    """Run, start, inspect and stop the server of a state directory.

    \b
    Example:
      pi-workflows server start
    """


@server.command("run")
@click.pass_context
def run_server(ctx: click.Context) -> None:
    """Run the server attached to this terminal until it stops (Ctrl-C stops it).

    The exit status is the server's. Use this under a process supervisor or for debugging;
    `server start` runs it detached instead.

    \b
    Example:
      pi-workflows --home /tmp/pw server run
    """
    home = cli_state(ctx).home
    try:
        # Imported here, not at the top: only this command runs the server in-process, and
        # every other command must work without loading the server and the store.
        from pi_workflows.server.main import run  # noqa: PLC0415
    except ImportError as exc:
        raise ServerEntryMissingError(f"cannot import pi_workflows.server.main ({exc})") from None
    ctx.exit(run(home))


@server.command("start")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=15.0,
    show_default=True,
    help="Seconds to wait for the server to answer.",
)
@json_option
@click.pass_context
def start_server(ctx: click.Context, timeout: float, as_json: bool) -> None:
    """Start the server in the background unless one already answers; exit 0 either way.

    The server's output goes to `<home>/logs/server.log`.

    \b
    Example:
      pi-workflows server start --json
    """
    info = ensure_server(cli_state(ctx).home, timeout=timeout)
    if as_json:
        print_json(
            {
                "pid": info.pid,
                "epoch": info.epoch,
                "version": info.version,
                "socket": str(info.socket_path),
                "started": info.started,
            }
        )
        return
    what = "started" if info.started else "already running"
    click.echo(
        f"server {what}: pid {info.pid}, epoch {info.epoch}, version {info.version}, "
        f"socket {info.socket_path}"
    )


@server.command("status")
@json_option
@click.pass_context
def server_status(ctx: click.Context, as_json: bool) -> None:
    """Show the server's pid, epoch, socket, runners, runs by status and problems to look at.

    Never starts a server: exits 3 when none is running.

    \b
    Example:
      pi-workflows server status --json
    """
    client = make_client(ctx, autostart=False)
    try:
        status = client.status()
    except ServerUnavailableError:
        path = socket_path(cli_state(ctx).home)
        if as_json:
            print_json({"running": False, "socket": str(path)})
        else:
            click.echo(f"server is not running (no answer on {path})")
        ctx.exit(EXIT_NO_SERVER)
    if as_json:
        print_json({**status, "running": True})
    else:
        console().print(render_status(status))


@server.command("stop")
@click.option(
    "--drain",
    type=click.FloatRange(min=0, max=3600),
    default=None,
    help="Seconds running nodes get to reach their next node boundary before their runs "
    "are parked (default: the server's PI_WORKFLOWS_DRAIN_SECONDS, 10); 0 parks at once.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="Seconds to wait for the server process to exit (after its drain).",
)
@json_option
@click.pass_context
def stop_server(ctx: click.Context, drain: float | None, timeout: float, as_json: bool) -> None:
    """Stop the server and wait until it has exited; running runs resume at the next start.

    Running nodes first get the drain time to reach their next node boundary, so a manual
    effect in flight finishes instead of needing review. Stopping again during the drain
    (or Ctrl-C on `server run`) stops at once. Exits 0 also when no server is running.

    \b
    Example:
      pi-workflows server stop
      pi-workflows server stop --drain 60
    """
    client = make_client(ctx, autostart=False)
    try:
        pid = client.connect().server_pid
        client.stop(wait=True, timeout=timeout + (drain or 0), drain=drain)
    except ServerUnavailableError:
        if as_json:
            print_json({"stopped": True, "wasRunning": False})
        else:
            click.echo("server is not running")
        return
    if as_json:
        print_json({"stopped": True, "wasRunning": True})
    else:
        click.echo(f"server stopped (pid {pid})")
