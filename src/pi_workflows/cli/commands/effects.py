"""`pi-workflows effect list|show|resolve`: see managed side effects (an ambiguous one with
the evidence its runner left) and settle them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import click
from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from pi_workflows.cli.errors import EXIT_USAGE, CliError
from pi_workflows.cli.evidence_text import evidence_lines
from pi_workflows.cli.options import JsonValue, json_option, make_client
from pi_workflows.cli.output import console, plain, print_json

__all__ = ["effect", "render_effects"]


@click.group()
def effect() -> None:
    """See managed side effects and settle the ambiguous ones.

    \b
    Example:
      pi-workflows effect list run_123
    """


@effect.command("list")
@click.argument("run_id", required=False)
@json_option
@click.pass_context
def list_effects(ctx: click.Context, run_id: str | None, as_json: bool) -> None:
    """List the effects of RUN_ID (or of every run): key, type, kind, status, attempts.

    \b
    Example:
      pi-workflows effect list --json
    """
    effects = make_client(ctx).list_effects(run_id)
    if as_json:
        print_json({"effects": effects})
        return
    if not effects:
        click.echo("no effects")
        return
    console().print(render_effects(effects))


def render_effects(effects: Sequence[Mapping[str, Any]]) -> RenderableType:
    """`effect list`: one row per effect. Ids, statuses and counts are never cut: the run
    id goes under the effect id, and the node and type wrap in their column."""
    ids = [plain(item.get("effectId")) for item in effects]
    runs = [plain(item.get("runId")) for item in effects]
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("effect / run", no_wrap=True, min_width=max(len(v) for v in ids + runs))
    table.add_column("node / type", overflow="fold", min_width=8)
    table.add_column("kind", no_wrap=True)
    statuses = [plain(item.get("status")) for item in effects]
    table.add_column("status", no_wrap=True, min_width=max(6, *map(len, statuses)))
    table.add_column("tries", no_wrap=True, justify="right")
    for item, effect_id, run_id, status in zip(effects, ids, runs, statuses, strict=True):
        style = "bold red" if status == "ambiguous" else ""
        table.add_row(
            Text(f"{effect_id}\n{run_id}"),
            Text(f"{plain(item.get('nodeId'))}#{plain(item.get('visit'))}\n"
                 f"{plain(item.get('type'))}"),
            Text(plain(item.get("kind"))),
            Text(status, style=style),
            Text(plain(item.get("attempts"))),
        )  # fmt: skip
    return table


@effect.command("show")
@click.argument("effect_id")
@json_option
@click.pass_context
def show_effect(ctx: click.Context, effect_id: str, as_json: bool) -> None:
    """Show the effect EFFECT_ID: its run, node, type, kind, status, tries and outcome, and,
    for an ambiguous one, the evidence its runner left of what its body did.

    \b
    Example:
      pi-workflows effect show eff_123
    """
    found = make_client(ctx).get_effect(effect_id)
    if as_json:
        print_json({"effect": found})
        return
    fields = Table(box=None, show_header=False, pad_edge=False)
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column(overflow="fold")
    for label, key in (
        ("effect", "effectId"), ("run", "runId"), ("node", "nodeId"), ("visit", "visit"),
        ("type", "type"), ("kind", "kind"), ("status", "status"), ("tries", "attempts"),
        ("key", "effectKey"),
    ):  # fmt: skip
        fields.add_row(label, Text(plain(found.get(key))))
    if found.get("error"):
        fields.add_row("error", Text(plain(found.get("error"))))
    if found.get("result") is not None:
        fields.add_row("result", Text(json.dumps(found.get("result"), sort_keys=True)))
    console().print(fields)
    lines = evidence_lines(found)
    for line in lines:  # wrapped to the terminal (80 columns when piped)
        console().print(Text(line))
    if found.get("status") == "ambiguous" and not lines:
        click.echo(
            f"no evidence of its outcome: decide with 'pi-workflows effect resolve {effect_id}"
            " --applied|--rejected|--retry'"
        )


@effect.command("resolve")
@click.argument("effect_id")
@click.option("--applied", is_flag=True, help="It was applied.")
@click.option("--rejected", is_flag=True, help="It was not applied.")
@click.option("--retry", is_flag=True, help="Run its body again (may duplicate it).")
@click.option(
    "--from-evidence",
    "from_evidence",
    is_flag=True,
    help="As the evidence its runner left says (effect show): applied with its result, or "
    "rejected with its error.",
)
@click.option("--result", type=JsonValue(), default=None, help="With --applied: its result.")
@click.option("--reason", default=None, help="With --rejected: why (becomes the node's error).")
@click.option("--idempotency-key", help="Key that makes a repeated resolution harmless.")
@json_option
@click.pass_context
def resolve(
    ctx: click.Context,
    effect_id: str,
    applied: bool,
    rejected: bool,
    retry: bool,
    from_evidence: bool,
    result: Any,
    reason: str | None,
    idempotency_key: str | None,
    as_json: bool,
) -> None:
    """Settle the ambiguous effect EFFECT_ID; then `run resume` continues its run.

    Exactly one of --applied (optionally with --result JSON, the node's output), --rejected
    --reason TEXT (the node fails with it), --retry (the body runs again: a duplicate is
    possible) or --from-evidence (as the evidence its runner left says: `effect show`).

    \b
    Example:
      pi-workflows effect resolve eff_123 --applied --result '{"ticket": 42}'
    """
    chosen = [
        name
        for name, on in (
            ("applied", applied), ("rejected", rejected), ("retry", retry),
            ("from-evidence", from_evidence),
        )
        if on
    ]  # fmt: skip
    if len(chosen) != 1:
        given = " and ".join(f"--{name}" for name in chosen)
        raise CliError(
            "choose exactly one of --applied, --rejected, --retry or --from-evidence"
            f" (got {given or 'none'})",
            exit_code=EXIT_USAGE,
        )
    resolution = chosen[0]
    if resolution == "from-evidence":
        if result is not None or reason is not None:
            raise CliError(
                "--from-evidence takes no --result or --reason: the evidence gives them",
                exit_code=EXIT_USAGE,
            )
        _resolve_from_evidence(ctx, effect_id, idempotency_key, as_json)
        return
    if resolution == "rejected" and not reason:
        raise CliError("--rejected needs --reason TEXT", exit_code=EXIT_USAGE)
    if result is not None and resolution != "applied":
        raise CliError("--result goes only with --applied", exit_code=EXIT_USAGE)
    if reason is not None and resolution != "rejected":
        raise CliError("--reason goes only with --rejected", exit_code=EXIT_USAGE)
    client = make_client(ctx)
    receipt = client.resolve_effect(
        effect_id, resolution, result=result, reason=reason, idempotency_key=idempotency_key
    )
    if resolution == "retry" and not as_json:  # once the effect is known to exist
        click.echo(
            "warning: --retry runs the effect's body again; if it had been applied, it will be "
            "applied twice",
            err=True,
        )
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    run_id = str(receipt.get("runId", ""))
    click.echo(f"effect {effect_id} resolved as {resolution}; {next_step(client.get_run(run_id))}")


def _resolve_from_evidence(
    ctx: click.Context, effect_id: str, idempotency_key: str | None, as_json: bool
) -> None:
    client = make_client(ctx)
    receipt = client.resolve_effect_from_evidence(effect_id, idempotency_key=idempotency_key)
    if as_json:
        print_json({**receipt.body, "adopted": receipt.adopted})
        return
    run_id = str(receipt.get("runId", ""))
    click.echo(
        f"effect {effect_id} resolved as {plain(receipt.get('resolution'))} from its evidence;"
        f" {next_step(client.get_run(run_id))}"
    )


def next_step(view: dict[str, Any]) -> str:
    """What to do next with the effect's run, by its status now."""
    run_id, status = view.get("runId", "?"), view.get("status")
    if status in ("paused", "ambiguous"):
        others = [e for e in view.get("effects", []) if e.get("status") == "ambiguous"]
        if others:
            return (
                f"run {run_id} still has {len(others)} ambiguous effect(s): resolve them with "
                f"'pi-workflows effect list {run_id}', then 'pi-workflows run resume {run_id}'"
            )
        return f"continue the run with 'pi-workflows run resume {run_id}'"
    if status == "completed":
        return f"run {run_id} is completed: nothing to resume"
    if status in ("failed", "timed_out", "cancelled"):
        return (
            f"run {run_id} is {status}: nothing to resume ('pi-workflows run restart {run_id}'"
            " runs it again from the start)"
        )
    return f"run {run_id} is {status}"
