"""Request payloads and run-status rules shared by the blocking and the async client.

Owns how a program's arguments become the payload of an operation (absolute paths, the
workflow and project resolved from the caller's directory, optional fields left out) and
which statuses a wait stops at, so `Client` and `AsyncClient` send exactly the same
requests. No I/O beyond looking for the project directory (`projects`) and reading this
process's environment and current directory (the run's recorded environment).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Collection, Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from pi_workflows.client.errors import RunEnvironmentError
from pi_workflows.client.projects import resolve_project, workflow_spec
from pi_workflows.protocol import environment

__all__ = [
    "SETTLED_STATUSES",
    "TERMINAL_STATUSES",
    "absolute",
    "environment_fields",
    "history_payload",
    "list_payload",
    "logs_payload",
    "start_payload",
    "reached",
    "GOES_ON_BY_ITSELF",
]

TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "timed_out", "cancelled"})
"""Statuses a run never leaves."""

SETTLED_STATUSES: Final = TERMINAL_STATUSES | {"waiting", "paused", "ambiguous"}
"""Statuses where nothing more happens without a person: `Client.wait` stops at these."""

GOES_ON_BY_ITSELF: Final = frozenset({"sleep", "retry", "children"})
"""Durable waits a run leaves by itself (its time comes, its children end): a run waiting
on one of these is not settled, though its status is `waiting`."""


def reached(view: Mapping[str, Any], until: Collection[str]) -> bool:
    """Whether the `RunView` is in a status of `until`; with the default `SETTLED_STATUSES`,
    a run that sleeps, waits for a retry or for its child runs is not there yet."""
    status = view.get("status")
    if status not in until:
        return False
    if until is SETTLED_STATUSES and status == "waiting":
        wait = view.get("wait")
        return not (isinstance(wait, Mapping) and wait.get("kind") in GOES_ON_BY_ITSELF)
    return True


def absolute(path: Path | str) -> str:
    """`path` as an absolute, normalised path (`..` removed, symlinks kept)."""
    return os.path.abspath(Path(path).expanduser())


def environment_fields(env: Mapping[str, str] | None) -> dict[str, Any]:
    """`{environment, workingDirectory}` of a `run.start` or `schedule.add`: this process's
    default variables (`protocol.environment.DEFAULT_VARIABLES`, `LC_*`) with `env` over
    them, and its current directory (docs/authoring.md, "Environment").

    Raises:
        RunEnvironmentError: a name or value is refused, or the bounds are passed.
    """
    if env is not None and not isinstance(env, Mapping):
        raise RunEnvironmentError("env must be a mapping of variable names to strings")
    variables = environment.snapshot(os.environ, env)
    problem = environment.environment_problem(variables)
    if problem is not None:
        raise RunEnvironmentError(problem)
    fields: dict[str, Any] = {"environment": variables}
    with contextlib.suppress(OSError):  # a removed current directory: / unless a project
        fields["workingDirectory"] = os.getcwd()
    return fields


def start_payload(
    workflow: str,
    run_input: Any,
    project_dir: Path | str | None,
    origin_session: str | None,
    detached: bool,
    env: Mapping[str, str] | None = None,
    deadline: float | timedelta | None = None,
) -> dict[str, Any]:
    """The `run.start` payload: a workflow path made absolute against the current directory,
    the project given (made absolute) or found from the current directory (`projects`), the
    input (default `{}`), the environment the run records (`environment_fields`) and the
    run deadline (`deadlineMs`) when `deadline` (seconds or a `timedelta`) is given."""
    payload: dict[str, Any] = {
        "workflow": workflow_spec(workflow),
        "input": {} if run_input is None else run_input,
        **environment_fields(env),
    }
    project = resolve_project(project_dir)
    if project is not None:
        payload["projectDir"] = str(project)
    if origin_session is not None:
        payload["originSession"] = origin_session
    if detached:
        payload["detached"] = True
    if deadline is not None:
        payload["deadlineMs"] = deadline_ms(deadline)
    return payload


def deadline_ms(deadline: float | timedelta) -> int:
    """A run deadline (seconds or a `timedelta`) as whole milliseconds; the server checks
    its bounds. `ValueError` for anything that is not a finite number of seconds."""
    seconds = deadline.total_seconds() if isinstance(deadline, timedelta) else deadline
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
    ):
        raise ValueError(f"deadline must be seconds or a timedelta, got {deadline!r}")
    return round(seconds * 1000)


def list_payload(
    status: Iterable[str] | str | None,
    workflow: str | None,
    since: int | None,
    after: str | None,
    limit: int | None,
    schedule: str | None = None,
    children: bool = False,
    parent: str | None = None,
    needs_person: bool = False,
) -> dict[str, Any]:
    """The `run.list` payload: filters, a page cursor and a page size, each optional; child
    runs are listed only with `children` (or as the children of `parent`, or among the runs
    that need a person)."""
    payload: dict[str, Any] = {}
    if status is not None:
        payload["status"] = [status] if isinstance(status, str) else list(status)
    if workflow is not None:
        payload["workflow"] = workflow
    if since is not None:
        payload["since"] = since
    if after is not None:
        payload["after"] = after
    if limit is not None:
        payload["limit"] = limit
    if schedule is not None:
        payload["schedule"] = schedule
    if children:
        payload["children"] = True
    if parent is not None:
        payload["parent"] = parent
    if needs_person:
        payload["needsPerson"] = True
    return payload


def history_payload(after: int, limit: int | None) -> dict[str, Any]:
    """The `run.history` payload."""
    return {"after": after} if limit is None else {"after": after, "limit": limit}


def logs_payload(node_id: str | None, after: int) -> dict[str, Any]:
    """The `run.logs` payload."""
    payload: dict[str, Any] = {"after": after}
    if node_id is not None:
        payload["nodeId"] = node_id
    return payload
