"""`pi-workflows run settings`: show a run's live settings, or change them with an RFC 6902
JSON Patch.

Loaded by the ``run`` group only when the command runs (``runs._RunGroup``).
"""

from __future__ import annotations

import json
from typing import Any

import click

from pi_workflows.cli.json_output import print_json
from pi_workflows.cli.options import JsonValue, json_option, make_client
from pi_workflows.protocol.json_patch import patch_problem

__all__ = ["settings"]


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


@click.command("settings")
@click.argument("run_id")
@click.option(
    "--patch",
    type=JsonValue(),
    default=None,
    help="Change the settings with this RFC 6902 JSON Patch (a JSON list of operations;"
    " or @FILE, or - for stdin).",
)
@click.option(
    "--expect-change",
    type=click.IntRange(min=0),
    default=None,
    help="Apply the patch only if the settings are still at this change number.",
)
@click.option("--idempotency-key", help="Send the change at most once under this key.")
@json_option
@click.pass_context
def settings(
    ctx: click.Context,
    run_id: str,
    patch: Any,
    expect_change: int | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Show RUN_ID's live settings, or change them with --patch.

    A change is applied by the server in one transaction with the next change number,
    after its result is checked against the workflow's settings schema; a patch that does
    not apply, or whose result the schema refuses, changes nothing. Node attempts that
    start after the change see it (ctx.settings); an attempt already running keeps the
    settings it started with.

    \b
    Example:
      pi-workflows run settings run_123
      pi-workflows run settings run_123 --patch '[{"op": "replace", "path": "/level", "value": 2}]'
      pi-workflows run settings run_123 --patch @change.json --expect-change 3
    """
    client = make_client(ctx)
    if patch is None:
        if expect_change is not None or idempotency_key is not None:
            raise click.UsageError("--expect-change and --idempotency-key need --patch")
        _show(client.settings(run_id), as_json)
        return
    problem = patch_problem(patch)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--patch'")
    receipt = client.change_settings(
        run_id, patch, expect_change=expect_change, idempotency_key=idempotency_key
    )
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    note = " (sent before with this key; receipt adopted)" if receipt.adopted else ""
    click.echo(
        f"run {run_id}: settings change {receipt.get('change')}{note}:"
        f" {_compact(receipt.get('settings'))}"
    )


def _show(view: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(view)
        return
    run_id = view.get("runId")
    if not view.get("declared") and view.get("settings") is None:
        click.echo(f"run {run_id}: its workflow declares no settings")
        return
    who = " and ".join(view.get("changedBy") or []) or "nobody"
    click.echo(f"run {run_id}: settings at change {view.get('change')} (changed by {who})")
    click.echo(json.dumps(view.get("settings"), ensure_ascii=False, indent=2))
    history = view.get("history") or []
    if len(history) > 1 or (history and history[-1].get("change") != 0):
        click.echo("changes:")
        for entry in history:
            patch = entry.get("patch")
            what = _compact(patch) if patch is not None else "(set, no patch)"
            click.echo(f"  {entry.get('change'):>4}  {entry.get('changedBy')}: {what}")
