"""`pi-workflows run start|list|show|pause|resume|cancel|restart|signal`: start and control
runs, and send them events.

`run history` and `run logs` live in `run_history.py`, `run fork` and `run upgrade` in
`run_lineage.py`; `_RunGroup` adds them to this group when they are used.
"""

from __future__ import annotations

import datetime as dt
import importlib
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import click

from pi_workflows.cli.errors import EXIT_FAILURE, CliError
from pi_workflows.cli.json_output import plain, print_json
from pi_workflows.cli.options import (
    RUN_STATUSES,
    Duration,
    JsonValue,
    RunCursor,
    Since,
    cli_state,
    env_option,
    json_option,
    make_client,
    project_option,
)
from pi_workflows.cli.waiting import FAILED_STATUSES, follow_run
from pi_workflows.client import Client, ClientError, Receipt

__all__ = ["run"]


class _RunGroup(click.Group):
    """The ``run`` group; ``history`` and ``logs`` (and their timeline formatting), ``fork``,
    ``retry`` and ``upgrade``, ``settings``, ``get``, and ``follow-up`` and ``follow-ups`` are
    imported only when one of them runs or the group's help lists them."""

    _LAZY: Final[Mapping[str, str]] = {
        "history": "run_history",
        "logs": "run_history",
        "fork": "run_lineage",
        "retry": "run_lineage",
        "upgrade": "run_lineage",
        "settings": "run_settings",
        "get": "run_values",
        "follow-up": "run_follow_ups",
        "follow-ups": "run_follow_ups",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self._LAZY and cmd_name not in self.commands:
            module = importlib.import_module(f"pi_workflows.cli.commands.{self._LAZY[cmd_name]}")
            for name, where in self._LAZY.items():
                if where == self._LAZY[cmd_name]:
                    self.add_command(getattr(module, name.replace("-", "_")), name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_RunGroup)
def run() -> None:
    """Start, list, inspect and control runs.

    \b
    Example:
      pi-workflows run start builtin:demo --input '{"items": [3, 1, 2]}' --wait
    """


@run.command("start")
@click.argument("workflow")
@click.option(
    "--input",
    "input_value",
    type=JsonValue(),
    default=None,
    help="The run's input as JSON (or @FILE, or - for stdin). Default: {}.",
)
@project_option
@click.option(
    "--session",
    "session_id",
    help="The Pi session that presents the run's steps and messages (its origin).",
)
@click.option(
    "--detached",
    is_flag=True,
    help="Run its agent steps in a headless Pi the server starts (no session needed).",
)
@env_option
@click.option(
    "--deadline",
    "deadline_ms",
    type=Duration(),
    default=None,
    help="Run deadline (45s, 90m, 2h, 3d, 1w): the whole run, its waits and its children end"
    " timed_out when it passes. Overrides the workflow's Workflow(deadline=).",
)
@click.option("--idempotency-key", help="Key that makes a repeated start return the same run.")
@click.option("--wait", is_flag=True, help="Follow the run until it completes, fails or waits.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="With --wait: give up after this many seconds (default: no limit).",
)
@json_option
@click.pass_context
def start(
    ctx: click.Context,
    workflow: str,
    input_value: Any,
    project: Path | None,
    session_id: str | None,
    detached: bool,
    env_items: tuple[tuple[str, str], ...],
    deadline_ms: int | None,
    idempotency_key: str | None,
    wait: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Start WORKFLOW (a name, builtin:NAME, or a path to NAME.workflow.py); print its run id.

    The input may be up to 16 MiB of JSON. The run records this command's PATH, HOME, LANG,
    LANGUAGE, LC_*, TZ, TERM, USER, LOGNAME, SHELL, TMPDIR and VIRTUAL_ENV (those set), plus
    each --env, and runs in the project directory (else the current one), whatever the
    server's own environment. --deadline bounds the whole run from now (it replaces the
    workflow's own run deadline, if any).

    With --wait, follow the run until it is completed, failed, timed out, cancelled, paused,
    ambiguous or waiting for an answer, print it, and exit 0 for completed or waiting, else 1.

    \b
    Example:
      pi-workflows run start triage --input @input.json --env GITHUB_TOKEN --wait
    """
    client = make_client(ctx)
    receipt = client.start_run(
        workflow,
        {} if input_value is None else input_value,
        project_dir=project,
        idempotency_key=idempotency_key,
        origin_session=session_id,
        detached=detached,
        env=dict(env_items),
        deadline=None if deadline_ms is None else deadline_ms / 1000,
    )
    run_id = str(receipt["runId"])
    if not wait:
        if as_json:
            print_json({"runId": run_id})
        else:
            click.echo(run_id)
        return
    if not as_json:
        click.echo(run_id)
    view = follow_run(client, run_id, timeout=timeout)
    if as_json:
        print_json({"runId": run_id, "run": view})
    else:
        _print_run(view)
    if view.get("status") in FAILED_STATUSES:
        ctx.exit(EXIT_FAILURE)


@run.command("list")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(RUN_STATUSES),
    help="Only runs with this status (repeat for several).",
)
@click.option("--workflow", help="Only runs of this workflow (its name).")
@click.option(
    "--schedule", "schedule_name", help="Only runs this schedule started (its name or id)."
)
@click.option(
    "--since", type=Since(), default=None, help="Only runs created since: 2h, 3d, or an ISO time."
)
@click.option(
    "--limit", type=click.IntRange(min=1, max=1000), help="At most this many runs (1-1000)."
)
@click.option(
    "--after", "cursor", type=RunCursor(),
    help="The page after this cursor (printed by a previous page).",
)  # fmt: skip
@click.option("--all", "every", is_flag=True, help="Every matching run, fetched page by page.")
@click.option(
    "--children", "with_children", is_flag=True,
    help="Also child runs (of a subworkflow or fan_out node); hidden otherwise.",
)  # fmt: skip
@click.option(
    "--lineage", "lineage_of", metavar="RUN_ID",
    help="Instead: the runs that came from RUN_ID (its forks and children, theirs, ...).",
)  # fmt: skip
@json_option
@click.pass_context
def list_runs(
    ctx: click.Context,
    statuses: tuple[str, ...],
    workflow: str | None,
    schedule_name: str | None,
    since: int | None,
    limit: int | None,
    cursor: str | None,
    every: bool,
    with_children: bool,
    lineage_of: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first, a page at a time (100 unless --limit; --all for every run).

    Child runs are left out unless --children; a parent waiting on its children shows
    their progress (`waiting 3/10 done`), a fork is marked `(fork)`. When more runs match,
    the last line names the cursor of the next page. `--lineage RUN_ID` lists the runs
    that came from RUN_ID instead, oldest generation first (with --limit only).

    \b
    Example:
      pi-workflows run list --status failed --workflow triage --since 3d
      pi-workflows run list --schedule nightly
      pi-workflows run list --lineage run_123
    """
    client = make_client(ctx)
    if lineage_of is not None:
        _list_lineage(client, lineage_of, limit, as_json, (statuses, workflow, schedule_name,
                      since, cursor, every, with_children))  # fmt: skip
        return
    status = list(statuses) or None
    if every:
        found = client.iter_runs(
            status, workflow=workflow, since=since, schedule=schedule_name, children=with_children
        )
        runs = list(found)
        following = None
    else:
        runs, following = client.list_runs_page(
            status, workflow=workflow, since=since, after=cursor, limit=limit,
            schedule=schedule_name, children=with_children,
        )  # fmt: skip
    if as_json:
        print_json({"runs": runs, "next": following})
        return
    _print_runs(runs)
    if following is not None:
        again = _filters(list(statuses), workflow, schedule_name, since, limit, with_children)
        click.echo(f"more runs: pi-workflows run list {again}--after {following}")


def _list_lineage(
    client: Client, run_id: str, limit: int | None, as_json: bool, others: tuple[Any, ...]
) -> None:
    """`run list --lineage RUN_ID`: the runs that came from it, each marked with how."""
    if any(others):
        raise click.UsageError("--lineage takes no other filter than --limit")
    runs = client.list_lineage(run_id, limit=limit)
    if as_json:
        print_json({"runs": runs, "next": None})
        return
    if not runs:
        click.echo(f"no run came from run {run_id}")
        return
    click.echo(f"runs that came from run {run_id} (oldest generation first):")
    _print_runs(runs)


def _print_runs(runs: Sequence[Mapping[str, Any]]) -> None:
    """`run list`'s table (rich is imported for tables only: `--json` never loads it)."""
    from pi_workflows.cli.output import console, render_runs  # noqa: PLC0415 - see above

    console().print(render_runs(runs))


def _print_run(view: Mapping[str, Any], *, verbose: bool = False) -> None:
    """One run for people (`show.render_run`; imported, with rich, only to print it)."""
    from pi_workflows.cli.output import console  # noqa: PLC0415 - see _print_runs
    from pi_workflows.cli.show import render_run  # noqa: PLC0415

    console().print(render_run(view, verbose=verbose))


def _filters(
    statuses: list[str],
    workflow: str | None,
    schedule_name: str | None,
    since: int | None,
    limit: int | None,
    with_children: bool,
) -> str:
    """The options of this `run list` again (ready to paste before `--after`): the next page
    of the same listing, `--since` as the instant it meant (a relative `2h` would move)."""
    words: list[str] = []
    for status in statuses:
        words += ["--status", status]
    if workflow is not None:
        words += ["--workflow", workflow]
    if schedule_name is not None:
        words += ["--schedule", schedule_name]
    if since is not None:
        moment = dt.datetime.fromtimestamp(since / 1000, tz=dt.UTC)
        words += ["--since", moment.isoformat(timespec="milliseconds")]
    if limit is not None:
        words += ["--limit", str(limit)]
    if with_children:
        words.append("--children")
    return "".join(f"{shlex.quote(word)} " for word in words)


@run.command("show")
@click.argument("run_id")
@click.option("--output", "node_id", help="Print only the latest output of this node (JSON).")
@click.option(
    "--verbose", "-v", is_flag=True, help="Also the internal statuses, revision, runner, ids."
)
@json_option
@click.pass_context
def show(
    ctx: click.Context, run_id: str, node_id: str | None, verbose: bool, as_json: bool
) -> None:
    """Show one run: status, what it waits on, attempts (start, duration, outcome, error,
    traceback), messages, effects and output.

    `--json` prints the RunView exactly as docs/protocol.md describes it, with a large
    input or output read in full. `--output NODE` prints that node's latest output as
    JSON, or, when its latest result is a failure, only the error line (exit 1).

    \b
    Example:
      pi-workflows run show run_123 --output classify
    """
    client = make_client(ctx)
    if node_id is not None:
        found = client.node_output(run_id, node_id)
        failed = found.get("status") != "completed"
        if as_json:
            print_json(found)
            if failed:
                ctx.exit(EXIT_FAILURE)
            return
        if failed:
            raise CliError(
                f"node {node_id} {plain(found.get('status'))}: {plain(found.get('error'))}"
            )
        print_json(found.get("output"))
        return
    view = client.get_run_complete(run_id)
    if as_json:
        print_json(view)
        return
    if view.get("runStatus") == "paused" and view.get("parkReason") in _CODE_PARKS:
        try:  # what `run upgrade` would do, for the summary's next step and its own section
            view = {**view, "upgrade": client.upgrade(run_id, dry_run=True).body}
        except ClientError as exc:
            view = {**view, "upgrade": {"possible": False, "refusal": exc.message}}
    waiting = view.get("waitingOn")
    if isinstance(waiting, dict) and waiting.get("kind") == "decision":
        # Imported here: only a run waiting on a decision asks about channels.
        from pi_workflows.cli.commands.channels import channel_states  # noqa: PLC0415

        request = waiting.get("request")
        audience = request.get("audience") if isinstance(request, dict) else None
        view = {**view, "channels": channel_states(cli_state(ctx).home, audience)}
    _print_run(view, verbose=verbose)


_CODE_PARKS = frozenset({"workflowSourceChanged", "workflowLoadFailed"})
"""Park reasons of a run whose code changed: `run show` asks what `run upgrade` would do."""


@run.command("pause")
@click.argument("run_id")
@click.option("--reason", help="Why, kept as the park detail (`run show`).")
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def pause(
    ctx: click.Context, run_id: str, reason: str | None, idempotency_key: str | None, as_json: bool
) -> None:
    """Pause a run; it holds no runner until `run resume`. A running run first finishes the
    node in flight (at most the server's drain time).

    \b
    Example:
      pi-workflows run pause run_123 --reason "waiting for the release freeze"
    """
    receipt = make_client(ctx).pause(run_id, reason, idempotency_key=idempotency_key)
    _report(receipt, as_json)


@run.command("resume")
@click.argument("run_id")
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def resume(ctx: click.Context, run_id: str, idempotency_key: str | None, as_json: bool) -> None:
    """Resume a paused or parked run from its last durable step.

    \b
    Example:
      pi-workflows run resume run_123
    """
    _report(make_client(ctx).resume(run_id, idempotency_key=idempotency_key), as_json)


@run.command("cancel")
@click.argument("run_id")
@click.option("--reason", help="Why, recorded with the cancellation.")
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def cancel(
    ctx: click.Context,
    run_id: str,
    reason: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Cancel a run; it ends as cancelled and its runner is stopped.

    \b
    Example:
      pi-workflows run cancel run_123 --reason "wrong input"
    """
    receipt = make_client(ctx).cancel(run_id, reason, idempotency_key=idempotency_key)
    _report(receipt, as_json)


@run.command("restart")
@click.argument("run_id")
@click.option("--idempotency-key", help="Key that makes a repeated command harmless.")
@json_option
@click.pass_context
def restart(ctx: click.Context, run_id: str, idempotency_key: str | None, as_json: bool) -> None:
    """Run the workflow of RUN_ID again from its start, as a new round of the same run.

    Works from every status but queued and running, completed included; the new round runs
    the workflow's code as it is now. A fork starts again from its fork point, with what it
    carried from its source.

    \b
    Example:
      pi-workflows run restart run_123
    """
    _report(make_client(ctx).restart(run_id, idempotency_key=idempotency_key), as_json)


@run.command("signal")
@click.argument("run_id")
@click.argument("name")
@click.option(
    "--data",
    type=JsonValue(),
    default=None,
    help="The event's data as JSON (or @FILE, or - for stdin): the wait_event node's output.",
)
@click.option(
    "--idempotency-key",
    help="The sender's key: the same key for the same run sends the event only once.",
)
@json_option
@click.pass_context
def signal(
    ctx: click.Context,
    run_id: str,
    name: str,
    data: Any,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Send the event NAME to RUN_ID, for its wait_event(NAME) node.

    Events are kept in order until a wait of that name takes them, so an event sent before
    the run reaches its wait is not lost. A wait that validates events answers here with
    its verdict.

    \b
    Example:
      pi-workflows run signal run_123 deployed --data '{"version": "1.4.2"}' \\
          --idempotency-key deploy-1.4.2
    """
    receipt = make_client(ctx).signal(run_id, name, data, idempotency_key=idempotency_key)
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    status = receipt.get("status", "pending")
    if status == "consumed":
        what = f"taken by its wait (attempt {receipt.get('attemptId')})"
    elif status == "discarded":
        what = "discarded: the run was restarted after it was sent, so its new round never takes it"
    elif status == "rejected":
        what = f"refused by its wait: {receipt.get('error')}"
    elif receipt.get("woke") and receipt.get("runStatus") == "paused":
        what = f"its wait took it; the run is paused and continues after 'run resume {run_id}'"
    elif receipt.get("woke"):
        what = "the run was waiting for it and continues"
    else:
        what = f"kept until the run waits for {name!r}"
    note = " (sent before with this key; receipt adopted)" if receipt.adopted else ""
    click.echo(f"event {name!r} #{receipt.get('seq', '-')} to run {run_id}: {what}{note}")


def _report(receipt: Receipt, as_json: bool) -> None:
    """Print a `{runId, status, revision}` receipt."""
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    note = " (done earlier by this command; receipt adopted)" if receipt.adopted else ""
    click.echo(
        f"run {receipt.get('runId', '-')}: {receipt.get('status', '-')} "
        f"(revision {receipt.get('revision', receipt.revision)}){note}"
    )
