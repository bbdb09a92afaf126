"""Shared pieces of the commands: the CLI state object, option types and client construction.

Owns how a command finds its state directory (`--home`, else the `PI_WORKFLOWS_HOME` rule),
the `JSON` option type (parsed and checked before any server is contacted), the default
project directory, and the client id the CLI uses. It never contacts a server by itself.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from pi_workflows.client import Client, state_home

__all__ = [
    "CLI_CLIENT_ID",
    "RUN_STATUSES",
    "CliState",
    "JsonValue",
    "cli_state",
    "default_project",
    "json_option",
    "make_client",
    "project_option",
]

CLI_CLIENT_ID: Final = "cli"
"""The client id of every CLI invocation, so that a command repeated with the same
`--idempotency-key` (and the same payload) is recognised as a retry across invocations."""

RUN_STATUSES: Final = (
    "queued",
    "running",
    "waiting",
    "paused",
    "completed",
    "failed",
    "timed_out",
    "cancelled",
    "ambiguous",
)
"""The user-facing run statuses of docs/protocol.md (`RunView.status`)."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class CliState:
    """What the root group resolved for every command (`ctx.obj`)."""

    home: Path


def cli_state(ctx: click.Context) -> CliState:
    """The `CliState` of this invocation; a default one when a command runs on its own."""
    state = ctx.find_object(CliState)
    return state if state is not None else CliState(home=state_home())


def make_client(ctx: click.Context, *, autostart: bool = True) -> Client:
    """A client for this invocation's state directory, closed when the command ends."""
    client = Client(cli_state(ctx).home, client_id=CLI_CLIENT_ID, autostart=autostart)
    ctx.call_on_close(client.close)
    return client


if TYPE_CHECKING:
    _ParamBase = click.ParamType[Any]
else:  # click < 8.4 has no generic ParamType; the pinned 8.5 has
    _ParamBase = click.ParamType


class JsonValue(_ParamBase):
    """An option value holding JSON text, `@FILE` to read it from a file, or `-` for stdin.

    Invalid JSON is a usage error that names the option and the position of the problem, so
    it is reported before any server is contacted. `NaN` and `Infinity` are refused.
    """

    name = "JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        text = value
        if value == "-":
            text = sys.stdin.read()
        elif value.startswith("@"):
            try:
                text = Path(value[1:]).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                self.fail(f"cannot read {value[1:]}: {exc}", param, ctx)
        try:
            return json.loads(text, parse_constant=_refuse_constant)
        except json.JSONDecodeError as exc:
            self.fail(
                f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} "
                f"(char {exc.pos})",
                param,
                ctx,
            )
        except ValueError as exc:
            self.fail(f"not valid JSON: {exc}", param, ctx)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def json_option(function: F) -> F:
    """Add `--json`: print the command's result as stable camelCase JSON instead of tables."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print the result as JSON (stable camelCase keys) instead of tables.",
    )(function)


def project_option(function: F) -> F:
    """Add `--project DIR` (see `default_project`)."""
    return click.option(
        "--project",
        "project",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="Project directory for workflow lookup (default: the current directory if it "
        "contains .pi/workflows, else none). Sent as an absolute path.",
    )(function)


def default_project(project: Path | None) -> Path | None:
    """`project` made absolute (and normalised); without one, the current directory if it
    has `.pi/workflows`, else None."""
    if project is not None:
        return Path(os.path.abspath(project.expanduser()))
    cwd = Path.cwd()
    return cwd if (cwd / ".pi" / "workflows").is_dir() else None
