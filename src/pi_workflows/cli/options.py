"""Shared pieces of the commands: the CLI state object, option types and client construction.

Owns how a command finds its state directory (`--home`, else the `PI_WORKFLOWS_HOME` rule),
the `JSON` option type (parsed and checked before any server is contacted), the
`--project` and `--env` options, and the client id the CLI uses. A workflow path and the project are
resolved by the client (`pi_workflows.client.projects`, the same rule for programs). It
never contacts a server by itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from pi_workflows.client import Client, state_home
from pi_workflows.protocol.environment import name_problem

__all__ = [
    "CLI_CLIENT_ID",
    "RUN_STATUSES",
    "CliState",
    "Duration",
    "EnvVariable",
    "JsonValue",
    "RunCursor",
    "Since",
    "cli_state",
    "env_option",
    "json_option",
    "make_client",
    "parse_duration",
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


class NodeOutput(_ParamBase):
    """A `run fork --set` value: `NODE=JSON` (JSON text, or `NODE=@FILE`); a pair
    `(NODE, value)`. A missing `=`, an empty node or invalid JSON is a usage error naming
    the option, before any server is contacted."""

    name = "NODE=JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        node, sep, text = value.partition("=")
        if not sep or not node:
            self.fail(f"expected NODE=JSON, got {value!r}", param, ctx)
        if text == "-":
            self.fail("NODE=- is not supported; use NODE=@FILE", param, ctx)
        return node, JsonValue().convert(text, param, ctx)


class EnvVariable(_ParamBase):
    """An `--env` value: `NAME` (its value taken from this command's environment) or
    `NAME=VALUE`; a pair `(NAME, VALUE)`. A name that is not a variable name, one of the
    server's `PI_WORKFLOWS_*` settings, or a `NAME` that is not set is a usage error."""

    name = "NAME[=VALUE]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        name, has_value, given = value.partition("=")
        problem = name_problem(name)
        if problem is not None:
            self.fail(problem, param, ctx)
        if has_value:
            return name, given
        if name not in os.environ:
            self.fail(f"{name} is not set here; give its value as {name}=VALUE", param, ctx)
        return name, os.environ[name]


def env_option(function: F) -> F:
    """Add `--env NAME[=VALUE]` (repeatable): variables the run records besides the default
    ones (docs/authoring.md, "Environment")."""
    return click.option(
        "--env",
        "env_items",
        multiple=True,
        type=EnvVariable(),
        help="Also give the run this environment variable: NAME (its value here) or"
        " NAME=VALUE; repeat for more. PATH, HOME, LANG, LC_*, TZ, ... are given anyway.",
    )(function)


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
    """Add `--project DIR` (without it, the client finds the project: `resolve_project`)."""
    return click.option(
        "--project",
        "project",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="Project directory for workflow lookup (default: the nearest directory from the "
        "current one upwards that contains .pi/workflows, else none). Sent as an absolute path.",
    )(function)


_UNITS: Final = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_duration(text: str) -> int:
    """`30d`, `12h`, `90m`, `45s` or `2w` as milliseconds; `ValueError` otherwise."""
    value = text.strip().lower()
    if len(value) < 2 or value[-1] not in _UNITS or not value[:-1].replace(".", "", 1).isdigit():
        raise ValueError(f"{text!r} is not a duration like 30d, 12h, 90m, 45s or 2w")
    return int(float(value[:-1]) * _UNITS[value[-1]])


class Duration(_ParamBase):
    """An option value that is a duration (`30d`, `12h`, ...), converted to milliseconds."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class RunCursor(_ParamBase):
    """A `run list` page cursor as the previous page printed it: `MILLISECONDS:RUN_ID`."""

    name = "CURSOR"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        created, _, run_id = text.partition(":")
        if not created.isdigit() or not run_id or len(text) > 200:
            self.fail(
                f"{text!r} is not a page cursor (use the --after value a previous page printed,"
                " like 1718000000000:run_01J...)",
                param,
                ctx,
            )
        return text


class Since(_ParamBase):
    """A point in time: a duration ago (`2h`, `3d`) or an ISO date/time; epoch milliseconds."""

    name = "WHEN"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        text = str(value)
        with contextlib.suppress(ValueError):
            return int(time.time() * 1000) - parse_duration(text)
        try:
            moment = dt.datetime.fromisoformat(text)
        except ValueError:
            self.fail(
                f"{text!r} is neither a duration (2h, 3d) nor an ISO date or time", param, ctx
            )
        if moment.tzinfo is None:
            moment = moment.astimezone()  # a local time, as the tables print them
        return int(moment.timestamp() * 1000)
