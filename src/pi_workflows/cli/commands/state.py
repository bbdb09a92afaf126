"""`pi-workflows state diagnose|repair|backup|prune|recover`: check, fix, copy and trim the state
database.

They go through the server, which owns the database; the CLI never opens it, except
`state recover`, which must work when a damaged file keeps a server from starting: it takes
the server lock itself and only reads the damaged file (``server/recover.py``).
"""

from __future__ import annotations

from pathlib import Path

import click

from pi_workflows.cli.errors import EXIT_FAILURE, EXIT_USAGE, CliError
from pi_workflows.cli.options import Duration, cli_state, json_option, make_client
from pi_workflows.cli.output import console, format_time, print_json, render_problems
from pi_workflows.server.errors import ServerAlreadyRunningError
from pi_workflows.server.recover import recover as salvage_state

__all__ = ["state"]


@click.group()
def state() -> None:
    """Check, repair and back up the state database (through the server).

    \b
    Example:
      pi-workflows state diagnose
    """


@state.command("diagnose")
@click.option(
    "--full", is_flag=True, help="SQLite's whole integrity_check (slower) instead of quick_check."
)
@json_option
@click.pass_context
def diagnose(ctx: click.Context, full: bool, as_json: bool) -> None:
    """Report a damaged file and contradictory or stuck state, read-only; exit 1 when there
    is any.

    \b
    Example:
      pi-workflows state diagnose --json
    """
    problems = make_client(ctx).diagnose(full=full)
    if as_json:
        print_json({"problems": problems})
    elif problems:
        console().print(render_problems(problems))
        click.echo(
            f"{len(problems)} problem(s) found; `pi-workflows state repair` fixes the "
            "repairable ones"
        )
    else:
        click.echo("no problems found")
    if problems:
        ctx.exit(EXIT_FAILURE)


@state.command("repair")
@json_option
@click.pass_context
def repair(ctx: click.Context, as_json: bool) -> None:
    """Fix the problems that have exact durable evidence; exit 1 if some remain.

    \b
    Example:
      pi-workflows state repair
    """
    receipt = make_client(ctx).repair()
    fixed = list(receipt.get("fixed") or [])
    remaining = list(receipt.get("remaining") or [])
    if as_json:
        print_json({"fixed": fixed, "remaining": remaining})
    else:
        click.echo(f"fixed {len(fixed)} problem(s); {len(remaining)} remaining")
        if remaining:
            console().print(render_problems(remaining))
    if remaining:
        ctx.exit(EXIT_FAILURE)


@state.command("backup")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def backup(ctx: click.Context, path: Path, as_json: bool) -> None:
    """Write a verified copy of the state database to PATH (made absolute).

    \b
    Example:
      pi-workflows state backup ~/pi-workflows-backup.sqlite
    """
    receipt = make_client(ctx).backup(path)
    if as_json:
        print_json(receipt.body)
    else:
        verified = "verified" if receipt.get("verified") else "NOT verified"
        click.echo(
            f"backed up to {receipt.get('path', path)} "
            f"({receipt.get('bytes', '?')} bytes, {verified})"
        )


@state.command("prune")
@click.option(
    "--older-than",
    "older_than",
    type=Duration(),
    required=True,
    help="Remove runs that ended longer ago than this: 30d, 12h, 2w, ...",
)
@click.option(
    "--backup",
    "backup_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the verified backup here (default: <home>/backups/state-before-prune-*.sqlite).",
)
@click.option("--no-backup", is_flag=True, help="Do not back up first.")
@json_option
@click.pass_context
def prune(
    ctx: click.Context, older_than: int, backup_path: Path | None, no_backup: bool, as_json: bool
) -> None:
    """Remove ended runs (completed, failed, timed out, cancelled) that ended before the
    cutoff, with their attempts, events, logs and receipts, after a verified backup.

    Runs that have not ended, and ended runs with an ambiguous effect, are never removed.
    See docs/state.md for what is kept.

    \b
    Example:
      pi-workflows state prune --older-than 30d
    """
    if no_backup and backup_path is not None:
        raise CliError("--backup and --no-backup exclude each other", exit_code=EXIT_USAGE)
    backup: Path | bool = False if no_backup else (backup_path or True)
    report = make_client(ctx).prune(older_than, backup=backup)
    if as_json:
        print_json(report)
        return
    saved = report.get("backup")
    if isinstance(saved, dict):
        click.echo(f"backed up to {saved.get('path')} ({saved.get('bytes')} bytes, verified)")
    click.echo(
        f"removed {report.get('runs', 0)} run(s) that ended before "
        f"{format_time(report.get('cutoff'))}: {report.get('events', 0)} events, "
        f"{report.get('attempts', 0)} attempts, {report.get('receipts', 0)} receipts, "
        f"{report.get('blobs', 0)} stored values"
    )


@state.command("recover")
@click.option(
    "--out", "target", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Where to write the salvaged database (default: beside the old one, timestamped).",
)  # fmt: skip
@json_option
@click.pass_context
def recover(ctx: click.Context, target: Path | None, as_json: bool) -> None:
    """Copy what SQLite can still read of a damaged state file into a new file beside it.

    The server must be stopped (this takes its lock). The damaged file is never changed;
    the report says what was lost, and how to switch to the new file.

    \b
    Example:
      pi-workflows server stop && pi-workflows state recover
    """
    home = cli_state(ctx).home
    try:
        report = salvage_state(home, target)
    except ServerAlreadyRunningError:
        raise CliError(
            f"a server is running on {home}; stop it first: pi-workflows server stop"
        ) from None
    except (FileNotFoundError, FileExistsError) as exc:
        raise CliError(str(exc)) from None
    if as_json:
        print_json(
            {
                "target": str(report.target),
                "tables": {
                    name: {"copied": t.copied, "unreadable": t.unreadable, "failed": t.failed}
                    for name, t in report.tables.items()
                },
                "lost": report.lost,
                "integrity": report.integrity,
                "orphans": report.orphans,
                "problems": [p.to_json() for p in report.problems],
            }
        )
        return
    damaged = {n: t for n, t in report.tables.items() if t.unreadable or t.failed}
    rows = sum(t.copied for t in report.tables.values())
    click.echo(f"recovered {rows} rows into {report.target}")
    for name, table in damaged.items():
        why = f" ({table.failed})" if table.failed else ""
        click.echo(f"  {name}: {table.copied} copied, up to {table.unreadable} lost{why}")
    if not damaged:
        click.echo("  every table read whole")
    if report.orphans:
        click.echo(f"  {report.orphans} row(s) name a row that was lost (foreign keys)")
    verdict = "sound" if not report.integrity else "damaged: " + "; ".join(report.integrity[:3])
    click.echo(f"the new file is {verdict}; diagnose finds {len(report.problems)} problem(s)")
    click.echo(
        f"to use it: move {home / 'state.sqlite'} (and its -wal and -shm files) aside, move"
        f" {report.target} to {home / 'state.sqlite'}, start the server and run"
        " 'pi-workflows state repair'"
    )
