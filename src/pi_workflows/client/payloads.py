"""Request payloads and run-status rules shared by the blocking and the async client.

Owns how a program's arguments become the payload of an operation (absolute paths, the
workflow and project resolved from the caller's directory, optional fields left out) and
which statuses a wait stops at, so `Client` and `AsyncClient` send exactly the same
requests. No I/O beyond looking for the project directory (`projects`).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from pi_workflows.client.projects import resolve_project, workflow_spec

__all__ = [
    "SETTLED_STATUSES",
    "TERMINAL_STATUSES",
    "absolute",
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


def start_payload(
    workflow: str,
    run_input: Any,
    project_dir: Path | str | None,
    origin_session: str | None,
    detached: bool,
) -> dict[str, Any]:
    """The `run.start` payload: a workflow path made absolute against the current directory,
    the project given (made absolute) or found from the current directory (`projects`), and
    the input (default `{}`)."""
    payload: dict[str, Any] = {
        "workflow": workflow_spec(workflow),
        "input": {} if run_input is None else run_input,
    }
    project = resolve_project(project_dir)
    if project is not None:
        payload["projectDir"] = str(project)
    if origin_session is not None:
        payload["originSession"] = origin_session
    if detached:
        payload["detached"] = True
    return payload


def list_payload(
    status: Iterable[str] | str | None,
    workflow: str | None,
    since: int | None,
    after: str | None,
    limit: int | None,
    schedule: str | None = None,
    children: bool = False,
) -> dict[str, Any]:
    """The `run.list` payload: filters, a page cursor and a page size, each optional; child
    runs are listed only with `children`."""
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
