"""`pi-workflows workflows list`: the workflows a run can start, as the server resolves them."""

from __future__ import annotations

from pathlib import Path

import click

from pi_workflows.cli.options import default_project, json_option, make_client, project_option
from pi_workflows.cli.output import console, print_json, render_workflows

__all__ = ["workflows"]


@click.group()
def workflows() -> None:
    """Discover workflows (project, user and built-in).

    \b
    Example:
      pi-workflows workflows list
    """


@workflows.command("list")
@project_option
@json_option
@click.pass_context
def list_workflows(ctx: click.Context, project: Path | None, as_json: bool) -> None:
    """List workflows by name, origin (project, user, builtin) and path, with load errors.

    \b
    Example:
      pi-workflows workflows list --project ~/code/app --json
    """
    found = make_client(ctx).list_workflows(default_project(project))
    if as_json:
        print_json({"workflows": found})
    else:
        console().print(render_workflows(found))
