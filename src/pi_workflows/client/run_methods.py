"""Client methods for programs and viewers, blocking (`RunMethods`, mixed into `Client`) and
asyncio (`AsyncRunMethods`, mixed into `AsyncClient`) side by side: start a run and wait
for its result, read its history and logs, page the run list, watch live views, show and
check workflows, and prune old runs.

`wait` and `result` follow the run through `run.watch` (server-pushed views on a second
connection), so they never poll. Everything else is a program of `operations`, run by
each client's driver, so both flavours send the same requests and return the same shapes;
`tests/client/test_surface.py` checks that their names and signatures stay the same.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Collection, Iterable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pi_workflows.client import operations as ops
from pi_workflows.client.connection import Connection
from pi_workflows.client.errors import NotFoundError, WaitTimeoutError
from pi_workflows.client.payloads import (
    SETTLED_STATUSES,
    TERMINAL_STATUSES,
    list_payload,
    reached,
)
from pi_workflows.client.watch import AsyncWatch, Watch
from pi_workflows.protocol import Hello

if TYPE_CHECKING:
    from pi_workflows.client.operations import JsonObject, Program, T

__all__ = ["AsyncRunMethods", "RunMethods"]

_WATCH_SLICE: Final = 30.0  # seconds per wait on the watch connection when there is no deadline


def _removed(run_id: str) -> NotFoundError:
    return NotFoundError(f"run {run_id} was removed", code="notFound", operation="run.watch")


class RunMethods:
    """`start`, `wait`, `result`, `history`, `logs`, watches, workflows and prune; needs
    `_run`, `connect` and a socket."""

    if TYPE_CHECKING:
        timeout: float
        start_timeout: float

        @property
        def socket_path(self) -> Path: ...

        @property
        def client_id(self) -> str: ...

        def connect(self, *, autostart: bool | None = None) -> Hello: ...

        def _run(self, program: Program[T]) -> T: ...

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
        env: Mapping[str, str] | None = None,
        deadline: float | timedelta | None = None,
    ) -> str:
        """Start `workflow` (a name, `builtin:NAME` or a path, relative to the current
        directory) with `input`; its run id.

        Without `project`, the project is the nearest directory from the current one upwards
        that contains `.pi/workflows`. The same `idempotency_key` (with the same client id
        and arguments) returns the same run instead of starting another. The run's
        environment is recorded as `start_run` says (`env` adds variables). `deadline`
        (seconds or a `timedelta`) overrides the workflow's run deadline (`Workflow(deadline=)`).
        """
        receipt = self._run(
            ops.start_run(
                workflow, input, project, idempotency_key, session, detached, env, deadline
            )
        )
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
        completed, failed, timed out, cancelled, waiting for an answer or an event, paused
        or ambiguous (a run that sleeps, waits for a retry or for its child runs goes on by
        itself, so the wait goes on too).

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
                    raise _removed(run_id)
                if pushed is not None:
                    view = dict(pushed["run"])
                    status = str(view.get("status"))
                    if reached(view, until):
                        return view

    def result(self, run_id: str, *, timeout: float | None = None) -> Any:
        """Wait until the run ends and return its output (read in full when large).

        Raises:
            RunFailedError: it ended failed, timed out or cancelled.
            WaitTimeoutError: it had not ended after `timeout` seconds (it may be waiting
                for an answer: see `wait`).
        """
        view = self.wait(run_id, timeout=timeout, until=TERMINAL_STATUSES)
        return self._run(ops.final_output(run_id, view))

    # -- what a run did ------------------------------------------------------------------

    def list_runs_page(
        self,
        status: Iterable[str] | str | None = None,
        *,
        workflow: str | None = None,
        since: int | None = None,
        after: str | None = None,
        limit: int | None = None,
        schedule: str | None = None,
        children: bool = False,
        parent: str | None = None,
        needs_person: bool = False,
    ) -> tuple[list[JsonObject], str | None]:
        """One page of `run.list` (newest first) and the cursor of the next page, or None.

        `since` is epoch milliseconds (runs created then or later); `schedule` (a schedule's
        name or id) keeps the runs that schedule started; `parent` lists that run's
        children; `needs_person` only the runs a person must act on (parked for a reason
        other than a pause, or waiting on a checkpoint or a decision), children included;
        other child runs (of a `subworkflow` or a `fan_out`) are listed only with `children`.
        """
        return self._run(
            ops.list_runs_page(
                status, workflow, since, after, limit, schedule, children, parent, needs_person
            )
        )

    def count_runs(
        self,
        *,
        workflow: str | None = None,
        since: int | None = None,
        schedule: str | None = None,
        children: bool = False,
        parent: str | None = None,
        needs_person: bool = False,
    ) -> dict[str, int]:
        """How many runs match the filters of `list_runs_page` (all but the status), per
        status: `{"completed": 12, "waiting": 2}`."""
        return self._run(ops.count_runs(workflow, since, schedule, children, parent, needs_person))

    def iter_runs(
        self,
        status: Iterable[str] | str | None = None,
        *,
        workflow: str | None = None,
        since: int | None = None,
        schedule: str | None = None,
        children: bool = False,
    ) -> Iterator[JsonObject]:
        """Every matching run summary, newest first, one page (1,000) at a time."""
        after: str | None = None
        while True:
            page, after = self.list_runs_page(
                status, workflow=workflow, since=since, after=after, limit=ops.PAGE,
                schedule=schedule, children=children,
            )  # fmt: skip
            yield from page
            if after is None:
                return

    def list_lineage(self, run_id: str, *, limit: int | None = None) -> list[JsonObject]:
        """`run.list` with `lineage`: the runs that came from `run_id` (its children and
        forks, theirs, and so on), oldest generation first, each summary with `via`
        (`child` or `fork`), `from` (the run it came from) and `generation`."""
        return self._run(ops.list_lineage(run_id, limit))

    def history(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[JsonObject]:
        """The run's events after revision `after`, oldest first (every page, or `limit`)."""
        return self._run(ops.history(run_id, after, limit))

    def logs(self, run_id: str, *, node: str | None = None) -> list[JsonObject]:
        """Every attempt's captured output (of one `node`), oldest first: `AttemptLog`s."""
        return self._run(ops.logs(run_id, node))

    def node_output(self, run_id: str, node: str) -> JsonObject:
        """`run.output`: the latest output of `node` in the run's current round, read in full:
        `{runId, nodeId, attemptId, visit, status, output, error}`."""
        return self._run(ops.node_output(run_id, node))

    def get_value(self, run_id: str, key: str, *, wait: float | None = None) -> Any:
        """The run's latest value published under `key` (`ctx.publish`), waiting up to
        `wait` seconds for it to appear (None: not at all). Raises `NotFoundError` (code
        `valueNotPublished`) when it was not published by then or the run ended without
        it, and (`runNotFound`) for an unknown run."""
        return self.published_value(run_id, key, wait=wait)["value"]

    def published_value(self, run_id: str, key: str, *, wait: float | None = None) -> JsonObject:
        """`run.value`: like `get_value`, the whole record `{runId, key, value, version,
        attemptId, nodeId, publishedAt, runStatus, revision}`."""
        return self._run(ops.published_value(run_id, key, wait, self.timeout - 5.0))

    # -- workflows and retention ---------------------------------------------------------

    def show_workflow(self, workflow: str, *, project: Path | str | None = None) -> JsonObject:
        """`workflows.show`: `{workflow, source, definition, definitionDigest}` (`workflow`
        and `project` are resolved as for `start`)."""
        return self._run(ops.show_workflow(workflow, project))

    def check_workflow(self, path: Path | str, *, project: Path | str | None = None) -> JsonObject:
        """`workflows.check`: `{path, ok, workflow, problems: [{code, message}]}`; workflows
        named by the file are looked up in `project` (default: the file's own project)."""
        return self._run(ops.check_workflow(path, project))

    def prune(self, older_than_ms: int, *, backup: Path | str | bool = True) -> JsonObject:
        """`state.prune`: back up (`True`: into `<home>/backups`; a path; or `False`), then
        remove ended runs that finished more than `older_than_ms` ago; the totals."""
        return self._run(ops.prune(older_than_ms, backup))


class AsyncRunMethods:
    """`RunMethods` for asyncio: the same names, arguments and results, awaitable
    (`iter_runs` is an async iterator); needs `_run`, `connect` and a socket."""

    if TYPE_CHECKING:
        timeout: float
        start_timeout: float

        @property
        def socket_path(self) -> Path: ...

        @property
        def client_id(self) -> str: ...

        async def connect(self, *, autostart: bool | None = None) -> Hello: ...

        async def _run(self, program: Program[T]) -> T: ...

    # -- starting and following runs -----------------------------------------------------

    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        project: Path | str | None = None,
        session: str | None = None,
        detached: bool = False,
        idempotency_key: str | None = None,
        env: Mapping[str, str] | None = None,
        deadline: float | timedelta | None = None,
    ) -> str:
        """Start `workflow` with `input`; its run id (see `Client.start`)."""
        receipt = await self._run(
            ops.start_run(
                workflow, input, project, idempotency_key, session, detached, env, deadline
            )
        )
        return str(receipt["runId"])

    async def _watch(
        self, operation: str, run_id: str | None, payload: JsonObject | None
    ) -> AsyncWatch:
        await self.connect()  # starts a server if allowed, so the watch connection finds one
        from pi_workflows.client.async_connection import AsyncConnection  # noqa: PLC0415 - asyncio on first use

        connection = await AsyncConnection.open(self.socket_path, timeout=self.start_timeout)
        return await AsyncWatch.open(
            connection,
            self.client_id,
            operation,
            run_id=run_id,
            payload=payload,
            timeout=self.timeout,
        )

    async def watch_run(self, run_id: str) -> AsyncWatch:
        """`run.watch` on a connection of its own (use with `async with`)."""
        return await self._watch("run.watch", run_id, None)

    async def watch_runs(
        self,
        status: Iterable[str] | str | None = None,
        *,
        workflow: str | None = None,
        limit: int = 100,
    ) -> AsyncWatch:
        """`runs.watch`: pushed `{runs, counts}` views of the newest matching runs."""
        return await self._watch(
            "runs.watch", None, list_payload(status, workflow, None, None, limit)
        )

    async def wait(
        self,
        run_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the blocking twin's timeout=
        until: Collection[str] = SETTLED_STATUSES,
    ) -> JsonObject:
        """Wait until the run's status is in `until`; that `RunView` (see `Client.wait`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        status = "unknown"
        async with await self.watch_run(run_id) as watch:
            while True:
                left = _WATCH_SLICE if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    assert timeout is not None
                    raise WaitTimeoutError(run_id, status, timeout)
                pushed = await watch.next_view(left)
                if watch.gone:
                    raise _removed(run_id)
                if pushed is not None:
                    view = dict(pushed["run"])
                    status = str(view.get("status"))
                    if reached(view, until):
                        return view

    async def result(self, run_id: str, *, timeout: float | None = None) -> Any:  # noqa: ASYNC109 - the blocking twin's timeout=
        """Wait until the run ends and return its output (see `Client.result`)."""
        view = await self.wait(run_id, timeout=timeout, until=TERMINAL_STATUSES)
        return await self._run(ops.final_output(run_id, view))

    # -- what a run did ------------------------------------------------------------------

    async def list_runs_page(
        self,
        status: Iterable[str] | str | None = None,
        *,
        workflow: str | None = None,
        since: int | None = None,
        after: str | None = None,
        limit: int | None = None,
        schedule: str | None = None,
        children: bool = False,
        parent: str | None = None,
        needs_person: bool = False,
    ) -> tuple[list[JsonObject], str | None]:
        """One page of `run.list` (newest first) and the cursor of the next page, or None."""
        return await self._run(
            ops.list_runs_page(
                status, workflow, since, after, limit, schedule, children, parent, needs_person
            )
        )

    async def count_runs(
        self,
        *,
        workflow: str | None = None,
        since: int | None = None,
        schedule: str | None = None,
        children: bool = False,
        parent: str | None = None,
        needs_person: bool = False,
    ) -> dict[str, int]:
        """How many runs match the filters, per status (see `Client.count_runs`)."""
        return await self._run(
            ops.count_runs(workflow, since, schedule, children, parent, needs_person)
        )

    async def iter_runs(
        self,
        status: Iterable[str] | str | None = None,
        *,
        workflow: str | None = None,
        since: int | None = None,
        schedule: str | None = None,
        children: bool = False,
    ) -> AsyncIterator[JsonObject]:
        """Every matching run summary, newest first, one page (1,000) at a time."""
        after: str | None = None
        while True:
            page, after = await self.list_runs_page(
                status, workflow=workflow, since=since, after=after, limit=ops.PAGE,
                schedule=schedule, children=children,
            )  # fmt: skip
            for run in page:
                yield run
            if after is None:
                return

    async def list_lineage(self, run_id: str, *, limit: int | None = None) -> list[JsonObject]:
        """`run.list` with `lineage`: the runs that came from `run_id` (see `Client`)."""
        return await self._run(ops.list_lineage(run_id, limit))

    async def history(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[JsonObject]:
        """The run's events after revision `after`, oldest first (every page, or `limit`)."""
        return await self._run(ops.history(run_id, after, limit))

    async def logs(self, run_id: str, *, node: str | None = None) -> list[JsonObject]:
        """Every attempt's captured output (of one `node`), oldest first: `AttemptLog`s."""
        return await self._run(ops.logs(run_id, node))

    async def node_output(self, run_id: str, node: str) -> JsonObject:
        """`run.output`: the latest output of `node` in the run's current round, read in full."""
        return await self._run(ops.node_output(run_id, node))

    async def get_value(self, run_id: str, key: str, *, wait: float | None = None) -> Any:
        """The run's latest value published under `key` (see `Client.get_value`)."""
        return (await self.published_value(run_id, key, wait=wait))["value"]

    async def published_value(
        self, run_id: str, key: str, *, wait: float | None = None
    ) -> JsonObject:
        """`run.value`: the whole record (see `Client.published_value`)."""
        return await self._run(ops.published_value(run_id, key, wait, self.timeout - 5.0))

    # -- workflows and retention ---------------------------------------------------------

    async def show_workflow(
        self, workflow: str, *, project: Path | str | None = None
    ) -> JsonObject:
        """`workflows.show` (see `Client.show_workflow`)."""
        return await self._run(ops.show_workflow(workflow, project))

    async def check_workflow(
        self, path: Path | str, *, project: Path | str | None = None
    ) -> JsonObject:
        """`workflows.check` (see `Client.check_workflow`)."""
        return await self._run(ops.check_workflow(path, project))

    async def prune(self, older_than_ms: int, *, backup: Path | str | bool = True) -> JsonObject:
        """`state.prune` (see `Client.prune`)."""
        return await self._run(ops.prune(older_than_ms, backup))
