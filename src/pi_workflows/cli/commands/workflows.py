"""`pi-workflows workflows list|show|check`: the workflows a run can start, one workflow's
graph, and validating a file without running it, all as the server's resolver sees them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from pi_workflows.cli.errors import EXIT_FAILURE
from pi_workflows.cli.graph import render_graph, render_mermaid
from pi_workflows.cli.options import json_option, make_client, project_option
from pi_workflows.cli.output import console, plain, print_json, render_workflows

__all__ = ["problem_line", "workflows"]


def problem_line(path: str, problem: Mapping[str, Any]) -> str:
    """One problem as editors read it: `FILE:LINE: error: MESSAGE`, or `FILE: error:
    MESSAGE` when no line applies (`FILE` is the problem's own file, `path` without one)."""
    file = plain(problem.get("file") or path)
    line = problem.get("line")
    where = f"{file}:{line}" if isinstance(line, int) and not isinstance(line, bool) else file
    return f"{where}: error: {plain(problem.get('message'))}"


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
@click.option(
    "--project",
    "project",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Project directory in which workflows a file names (fan_out, subworkflow) are looked "
    "up (default: each file's own project, the nearest directory from the file's folder "
    "upwards that contains .pi/workflows).",
)
@json_option
@click.pass_context
def check_workflow(
    ctx: click.Context, paths: tuple[Path, ...], project: Path | None, as_json: bool
) -> None:
    """Validate workflow files without running them: each loads and its graph is valid.

    Prints `PATH: ok`, or every problem of the file, one line each at the line of the node
    or edge it concerns (`PATH:LINE: error: MESSAGE`, or `PATH: error: MESSAGE` when no
    line applies), then a count of the problems; exits 1 when any file has one. For
    editors and CI. A workflow the file names (`fan_out`, `subworkflow`) is looked up in
    the file's own project, as `run start PATH` does, or in `--project DIR`.

    \b
    Example:
      pi-workflows workflows check .pi/workflows/*.workflow.py
    """
    client = make_client(ctx)
    results = [client.check_workflow(path, project=project) for path in paths]
    if as_json:
        print_json({"results": results})
    else:
        total, files = 0, 0
        for result in results:
            if result.get("ok"):
                click.echo(f"{result['path']}: ok (workflow {result.get('workflow')})")
            listed = result.get("problems") or []
            for problem in listed:
                click.echo(problem_line(str(result["path"]), problem))
            count = result.get("problemCount")
            if isinstance(count, int) and count > len(listed):
                click.echo(f"{result['path']}: {count - len(listed)} more problems not listed")
            total += count if isinstance(count, int) and count > len(listed) else len(listed)
            files += 1 if listed else 0
        if total:
            problems = f"{total} problem{'s' if total != 1 else ''}"
            click.echo(f"{problems} in {files} of {len(results)} file{'s' * (len(results) != 1)}")
    if not all(result.get("ok") for result in results):
        ctx.exit(EXIT_FAILURE)
