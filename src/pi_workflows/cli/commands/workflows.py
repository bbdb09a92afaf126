"""`pi-workflows workflows list|show|check`: the workflows a run can start, one workflow's
graph, and validating a file without running it, all as the server's resolver sees them."""

from __future__ import annotations

from pathlib import Path

import click

from pi_workflows.cli.errors import EXIT_FAILURE
from pi_workflows.cli.graph import render_graph, render_mermaid
from pi_workflows.cli.options import (
    default_project,
    json_option,
    make_client,
    project_option,
    workflow_spec,
)
from pi_workflows.cli.output import console, print_json, render_workflows

__all__ = ["workflows"]


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
    found = make_client(ctx).list_workflows(default_project(project))
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
    shown = make_client(ctx).show_workflow(
        workflow_spec(workflow), project=default_project(project)
    )
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

    Prints one line per problem (`PATH: error: MESSAGE`) or `PATH: ok`, and exits 1 when any
    file has a problem; for editors and CI.

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
                click.echo(f"{result['path']}: error: {problem.get('message')}")
    if not all(result.get("ok") for result in results):
        ctx.exit(EXIT_FAILURE)
