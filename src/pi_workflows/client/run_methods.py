"""Client methods for programs and viewers (mixed into `Client`): start a run and wait for
its result, read its history and logs, page the run list, watch live views, show and check
workflows, and prune old runs.

`wait` and `result` follow the run through `run.watch` (server-pushed views on a second
connection), so they never poll. Every method is one or a few operations of client
protocol v1 (docs/protocol.md); none interprets run state beyond the documented statuses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pi_workflows.client.connection import Connection
from pi_workflows.client.errors import NotFoundError, RunFailedError, WaitTimeoutError
from pi_workflows.client.payloads import (
    SETTLED_STATUSES,
    TERMINAL_STATUSES,
    absolute,
    history_payload,
    list_payload,
    logs_payload,
    start_payload,
)
from pi_workflows.client.watch import Watch
from pi_workflows.protocol import Hello

if TYPE_CHECKING:
    from pi_workflows.client.sync_client import JsonObject, Receipt

_WATCH_SLICE = 30.0  # seconds per wait on the watch connection when there is no deadline


class RunMethods:
    """`start`, `wait`, `result`, `history`, `logs`, watches, workflows and prune; needs
    `call`, `connect` and a socket."""

    if TYPE_CHECKING:
        call: Callable[..., Receipt]
        timeout: float
        start_timeout: float

        @property
        def socket_path(self) -> Path: ...

        @property
        def client_id(self) -> str: ...

        def connect(self, *, autostart: bool | None = None) -> Hello: ...

        def read_value(self, ref: Mapping[str, Any]) -> Any: ...

    # -- starting and following runs -----------------------------------------------------

    def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        project: Path | str | None = None,
        session: str | None = None,
        detached: bool = False,
        idempotency_key: str | None = None,
    ) -> str:
        """Start `workflow` (a name, `builtin:NAME` or a path) with `input`; its run id.

        The same `idempotency_key` (with the same client id and arguments) returns the same
        run instead of starting another.
        """
        payload = start_payload(workflow, input, project, session, detached)
        receipt = self.call("run.start", payload, idempotency_key=idempotency_key)
        return str(receipt["runId"])

    def watch_run(self, run_id: str) -> Watch:
        """`run.watch` on a connection of its own: views `{runId, run, graph}` as they change."""
        self.connect()  # starts a server if allowed, so the watch connection finds one
        connection = Connection.open(self.socket_path, timeout=self.start_timeout)
        return Watch(connection, self.client_id, "run.watch", run_id=run_id, timeout=self.timeout)

    def watch_runs(
        self,
        status: Iterable[str] | str | None = None,
        *,
        workflow: str | None = None,
        limit: int = 100,
    ) -> Watch:
        """`runs.watch`: views `{runs, counts}` of the newest matching runs as they change."""
        self.connect()
        connection = Connection.open(self.socket_path, timeout=self.start_timeout)
        payload = list_payload(status, workflow, None, None, limit)
        return Watch(
            connection, self.client_id, "runs.watch", payload=payload, timeout=self.timeout
        )

    def wait(
        self,
        run_id: str,
        *,
        timeout: float | None = None,
        until: Collection[str] = SETTLED_STATUSES,
    ) -> JsonObject:
        """Wait until the run's status is in `until` and return that `RunView`.

        By default that is any status where nothing more happens without a person:
        completed, failed, timed out, cancelled, waiting for an answer, paused or ambiguous.

        Raises:
            WaitTimeoutError: `timeout` seconds passed first (the run goes on).
            NotFoundError: there is no such run (or it was pruned meanwhile).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        status = "unknown"
        with self.watch_run(run_id) as watch:
            while True:
                left = _WATCH_SLICE if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    assert timeout is not None
                    raise WaitTimeoutError(run_id, status, timeout)
                pushed = watch.next_view(left)
                if watch.gone:
                    raise NotFoundError(
                        f"run {run_id} was removed", code="notFound", operation="run.watch"
                    )
                if pushed is not None:
                    view = dict(pushed["run"])
                    status = str(view.get("status"))
                    if status in until:
                        return view

    def result(self, run_id: str, *, timeout: float | None = None) -> Any:
        """Wait until the run ends and return its output (read in full when large).

        Raises:
            RunFailedError: it ended failed, timed out or cancelled.
            WaitTimeoutError: it had not ended after `timeout` seconds (it may be waiting
                for an answer: see `wait`).
        """
        view = self.wait(run_id, timeout=timeout, until=TERMINAL_STATUSES)
        status = str(view.get("status"))
        if status != "completed":
            raise RunFailedError(run_id, status, view.get("error"), view)
        ref = view.get("outputRef")
        return self.read_value(ref) if isinstance(ref, dict) else view.get("output")

    # -- what a run did ------------------------------------------------------------------

    def list_runs_page(
        self,
        status: Iterable[str] | str | None = None,
        *,
        workflow: str | None = None,
        since: int | None = None,
        after: str | None = None,
        limit: int | None = None,
    ) -> tuple[list[JsonObject], str | None]:
        """One page of `run.list` (newest first) and the cursor of the next page, or None.

        `since` is epoch milliseconds (runs created then or later).
        """
        body = self.call("run.list", list_payload(status, workflow, since, after, limit)).body
        cursor = body.get("next")
        return list(body.get("runs", [])), None if cursor is None else str(cursor)

    def iter_runs(
        self,
        status: Iterable[str] | str | None = None,
        *,
        workflow: str | None = None,
        since: int | None = None,
    ) -> Iterator[JsonObject]:
        """Every matching run summary, newest first, one page (1,000) at a time."""
        after: str | None = None
        while True:
            page, after = self.list_runs_page(
                status, workflow=workflow, since=since, after=after, limit=1000
            )
            yield from page
            if after is None:
                return

    def history(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[JsonObject]:
        """The run's events after revision `after`, oldest first (every page, or `limit`)."""
        events: list[JsonObject] = []
        while True:
            want = None if limit is None else min(1000, limit - len(events))
            body = self.call("run.history", history_payload(after, want), run_id=run_id).body
            events.extend(body.get("events", []))
            cursor = body.get("next")
            if cursor is None or (limit is not None and len(events) >= limit):
                return events
            after = int(cursor)

    def logs(self, run_id: str, *, node: str | None = None) -> list[JsonObject]:
        """Every attempt's captured output (of one `node`), oldest first: `AttemptLog`s."""
        found: list[JsonObject] = []
        after = 0
        while True:
            body = self.call("run.logs", logs_payload(node, after), run_id=run_id).body
            found.extend(body.get("logs", []))
            cursor = body.get("next")
            if cursor is None:
                return found
            after = int(cursor)

    def node_output(self, run_id: str, node: str) -> JsonObject:
        """`run.output`: the latest output of `node` in the run's current round, read in full:
        `{runId, nodeId, attemptId, visit, status, output}`."""
        body = dict(self.call("run.output", {"nodeId": node}, run_id=run_id).body)
        ref = body.get("outputRef")
        if isinstance(ref, dict):
            body["output"] = self.read_value(ref)
            body["outputRef"] = None
        return body

    # -- workflows and retention ---------------------------------------------------------

    def show_workflow(self, workflow: str, *, project: Path | str | None = None) -> JsonObject:
        """`workflows.show`: `{workflow, source, definition, definitionDigest}`."""
        payload: JsonObject = {"workflow": workflow}
        if project is not None:
            payload["projectDir"] = absolute(project)
        return dict(self.call("workflows.show", payload).body)

    def check_workflow(self, path: Path | str) -> JsonObject:
        """`workflows.check`: `{path, ok, workflow, problems: [{code, message}]}`."""
        return dict(self.call("workflows.check", {"path": absolute(path)}).body)

    def prune(self, older_than_ms: int, *, backup: Path | str | bool = True) -> JsonObject:
        """`state.prune`: back up (`True`: into `<home>/backups`; a path; or `False`), then
        remove ended runs that finished more than `older_than_ms` ago; the totals."""
        chosen: str | bool = backup if isinstance(backup, bool) else absolute(backup)
        payload = {"olderThanMs": older_than_ms, "backup": chosen}
        return dict(self.call("state.prune", payload).body)
