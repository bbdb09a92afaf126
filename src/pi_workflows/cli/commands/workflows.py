"""`pi-workflows workflows list|show|check`: the workflows a run can start, one workflow's
graph, and validating a file without running it, all as the server's resolver sees them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import click

from pi_workflows.cli.errors import EXIT_FAILURE
from pi_workflows.cli.graph import render_graph, render_mermaid
from pi_workflows.cli.options import json_option, make_client, project_option
from pi_workflows.cli.output import console, plain, print_json, render_workflows

__all__ = ["problem_line", "workflows"]

_AT_LINE: Final = re.compile(r"(\d+):\s*(.*)", re.DOTALL)


def problem_line(path: str, message: str) -> str:
    """One problem as editors read it: `PATH:LINE: error: MESSAGE`, or `PATH: error:
    MESSAGE`; a message that already starts with the path (and line) names it once."""
    if message.startswith(f"{path}:"):
        rest = message[len(path) + 1 :].lstrip()
        at_line = _AT_LINE.fullmatch(rest)
        if at_line is not None:
            return f"{path}:{at_line.group(1)}: error: {at_line.group(2)}"
        return f"{path}: error: {rest}"
    return f"{path}: error: {message}"


@click.group()
def workflows() -> None:
    """Discover, show and check workflows (project, user and built-in).

    \b
    Example:
      pi-workflows workflows list
    """


@workflows.command("list")
@project_option
@json_option
@click.pass_context
def list_workflows(ctx: click.Context, project: Path | None, as_json: bool) -> None:
    """List workflows by name, origin (project, user, builtin) and path, with the files they
    shadow and the error of any that does not load.

    \b
    Example:
      pi-workflows workflows list --project ~/code/app --json
    """
    found = make_client(ctx).list_workflows(project)
    if as_json:
        print_json({"workflows": found})
    else:
        console().print(render_workflows(found))


@workflows.command("show")
@click.argument("workflow")
@project_option
@click.option("--mermaid", is_flag=True, help="Print the graph as a Mermaid flowchart.")
@json_option
@click.pass_context
def show_workflow(
    ctx: click.Context, workflow: str, project: Path | None, mermaid: bool, as_json: bool
) -> None:
    """Print WORKFLOW's graph: its nodes (kind, timeout, effect) and edges (with switch cases).

    WORKFLOW is a name, builtin:NAME or a path to a NAME.workflow.py file.

    \b
    Example:
      pi-workflows workflows show triage --mermaid
    """
    shown = make_client(ctx).show_workflow(workflow, project=project)
    if as_json:
        print_json(shown)
    elif mermaid:
        click.echo(render_mermaid(shown.get("definition") or {}))
    else:
        console().print(render_graph(shown))


@workflows.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def check_workflow(ctx: click.Context, paths: tuple[Path, ...], as_json: bool) -> None:
    """Validate workflow files without running them: each loads and its graph is valid.

    Prints one line per problem (`PATH:LINE: error: MESSAGE`, or `PATH: error: MESSAGE`
    when no line is known) or `PATH: ok`, and exits 1 when any file has a problem; for
    editors and CI.

    \b
    Example:
      pi-workflows workflows check .pi/workflows/*.workflow.py
    """
    client = make_client(ctx)
    results = [client.check_workflow(path) for path in paths]
    if as_json:
        print_json({"results": results})
    else:
        for result in results:
            if result.get("ok"):
                click.echo(f"{result['path']}: ok (workflow {result.get('workflow')})")
            for problem in result.get("problems", []):
                click.echo(problem_line(str(result["path"]), plain(problem.get("message"))))
    if not all(result.get("ok") for result in results):
        ctx.exit(EXIT_FAILURE)
