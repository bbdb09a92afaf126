"""`pi-workflows run history` and `run logs`: what a run did, and `--follow` it live.

Both read through the server (`run.history`, `run.logs`); `--follow` subscribes to the
run's server-pushed views (`run.watch`) and reads what is new after each change, until the
run ends (completed, failed, timed out or cancelled) or Ctrl-C.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

import click

from pi_workflows.cli.errors import CliError
from pi_workflows.cli.options import json_option, make_client
from pi_workflows.cli.output import print_json
from pi_workflows.cli.timeline import HistoryFormat, LogFollower, log_header, log_text
from pi_workflows.client import TERMINAL_STATUSES, Client, JsonObject

__all__ = ["history", "logs"]

_WAIT_SLICE = 30.0


def _follow(client: Client, run_id: str, on_change: Callable[[JsonObject], None]) -> None:
    """Call `on_change(run view)` after every pushed change until the run has ended."""
    with client.watch_run(run_id) as watch:
        while True:
            pushed = watch.next_view(_WAIT_SLICE)
            if watch.gone:
                return
            if pushed is None:
                continue
            view = pushed["run"]
            on_change(view)
            if view.get("status") in TERMINAL_STATUSES:
                return


def _check_node(client: Client, run_id: str, node_id: str) -> None:
    """Raise a one-line `CliError` naming the run's nodes unless `node_id` is one of them
    (they come from the run's graph, the first view `run.watch` pushes)."""
    with client.watch_run(run_id) as watch:
        view = watch.next_view(client.timeout) or {}
    nodes = [str(node.get("id")) for node in (view.get("graph") or {}).get("nodes") or []]
    if nodes and node_id not in nodes:
        raise CliError(f"run {run_id} has no node {node_id!r}; its nodes: {', '.join(nodes)}")


def _json_line(value: Any) -> None:
    import json  # noqa: PLC0415 - only the NDJSON path needs compact encoding

    click.echo(json.dumps(value, sort_keys=True, ensure_ascii=False))


@click.command("history")
@click.argument("run_id")
@click.option(
    "--after", type=click.IntRange(min=0), default=0, help="Only events after this revision."
)
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many events.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events until the run ends.")
@json_option
@click.pass_context
def history(
    ctx: click.Context, run_id: str, after: int, limit: int | None, follow: bool, as_json: bool
) -> None:
    """Print the run's event history: time, revision, event, node, who acted, and a detail.

    Pages of events are fetched until the end (or --limit). The columns fit the terminal
    (80 columns when output is not a terminal): a long detail wraps, and a line with the
    date comes before the first event of each day that is not today. With --follow, new
    events are printed as they happen until the run has ended; with --json --follow each
    event is one JSON line.

    \b
    Example:
      pi-workflows run history run_123 --follow
    """
    client = make_client(ctx)
    events = client.history(run_id, after=after, limit=limit)
    if as_json and not follow:
        print_json({"runId": run_id, "events": events})
        return
    layout = None
    if not as_json:
        width = shutil.get_terminal_size((80, 24)).columns
        layout = HistoryFormat(events, width, growing=follow)
        click.echo(layout.header())

    def emit(event: JsonObject) -> None:
        if layout is None:
            _json_line(event)
        else:
            click.echo("\n".join(layout.lines(event)))

    for event in events:
        emit(event)
    if not follow:
        return
    last = [events[-1]["revision"] if events else after]

    def more(_view: JsonObject) -> None:
        for event in client.history(run_id, after=last[0]):
            emit(event)
            last[0] = event["revision"]

    _follow(client, run_id, more)


@click.command("logs")
@click.argument("run_id")
@click.option("--node", "node_id", help="Only the attempts of this node.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new output until the run ends.")
@json_option
@click.pass_context
def logs(ctx: click.Context, run_id: str, node_id: str | None, follow: bool, as_json: bool) -> None:
    """Print what each attempt's callbacks printed and logged and its shell commands wrote.

    Each attempt keeps the newest 64 KiB of its output (older output is counted, and the
    listing says how much was not kept) and the traceback of a callback that raised.
    With --follow, new output is printed as it arrives until the run has ended (with --json:
    one JSON line per attempt whenever its output grows).

    \b
    Example:
      pi-workflows run logs run_123 --node build --follow
    """
    client = make_client(ctx)
    found = client.logs(run_id, node=node_id)
    if node_id is not None and not found:
        _check_node(client, run_id, node_id)
    if as_json and not follow:
        print_json({"runId": run_id, "logs": found})
        return
    if as_json:
        sizes: dict[str, int] = {}

        def changed(current: list[JsonObject]) -> None:
            for log in current:
                if sizes.get(log["attemptId"]) != log["totalBytes"]:
                    sizes[log["attemptId"]] = log["totalBytes"]
                    _json_line(log)

        changed(found)
        _follow(client, run_id, lambda _view: changed(client.logs(run_id, node=node_id)))
        return
    if not follow:
        shown = [log for log in found if log.get("totalBytes") or log.get("traceback")]
        if not shown:
            click.echo("no output captured" + (f" for node {node_id}" if node_id else ""))
        for log in shown:
            click.echo(log_header(log))
            click.echo(log_text(log))
        return
    follower = LogFollower(lambda text: click.echo(text, nl=False))
    follower.update(found)
    _follow(client, run_id, lambda _view: follower.update(client.logs(run_id, node=node_id)))
    follower.close()
