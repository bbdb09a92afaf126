"""`pi-workflows state diagnose|repair|backup|prune`: check, fix, copy and trim the state
database.

All three go through the server, which owns the database; the CLI never opens it.
"""

from __future__ import annotations

from pathlib import Path

import click

from pi_workflows.cli.errors import EXIT_FAILURE, EXIT_USAGE, CliError
from pi_workflows.cli.options import Duration, json_option, make_client
from pi_workflows.cli.output import console, format_time, print_json, render_problems

__all__ = ["state"]


@click.group()
def state() -> None:
    """Check, repair and back up the state database (through the server).

    \b
    Example:
      pi-workflows state diagnose
    """


@state.command("diagnose")
@json_option
@click.pass_context
def diagnose(ctx: click.Context, as_json: bool) -> None:
    """Report contradictory or stuck state, read-only; exit 1 when there is any.

    \b
    Example:
      pi-workflows state diagnose --json
    """
    problems = make_client(ctx).diagnose()
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
