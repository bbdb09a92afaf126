"""What each client method sends and how it reads the answers, written once for both clients.

A method made of plain request/answer exchanges is a *program* here: a generator that
yields the `Call`s to send (and a `Pause` before asking again) and receives each call's
`Receipt`; its return value is the method's result. `Client` runs a program with blocking
calls (`run_blocking`) and `AsyncClient` with awaited ones (`run_async`), so the two send
exactly the same requests and return the same shapes. Also owns `Receipt` and turning a
`Response` into a receipt or the `CommandError` its outcome names. Apart from the two
drivers (which sleep for a `Pause`), nothing here does I/O.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, TypeVar

from pi_workflows.client.errors import (
    ClaimLostError,
    CommandError,
    ConflictError,
    InputTooLargeError,
    InvalidPayloadError,
    NotFoundError,
    RejectedError,
    RunFailedError,
    ServerProtocolError,
    UnavailableError,
)
from pi_workflows.client.payloads import (
    absolute,
    history_payload,
    list_payload,
    logs_payload,
    start_payload,
)
from pi_workflows.client.projects import find_project, resolve_project, workflow_spec
from pi_workflows.protocol import (
    INLINE_INPUT_BYTES,
    MAX_INPUT_BYTES,
    UPLOAD_CHUNK_BYTES,
    NotJsonError,
    Outcome,
    Request,
    Response,
    canonical_json,
    sha256_hex,
)

__all__ = [
    "SUBMIT_POLL_SECONDS",
    "Call",
    "JsonObject",
    "Pause",
    "Program",
    "Receipt",
    "new_key",
    "receipt_of",
    "run_async",
    "run_blocking",
]

JsonObject = dict[str, Any]
"""A decoded JSON object as the server sent it (camelCase keys)."""

T = TypeVar("T")

SUBMIT_POLL_SECONDS: Final = 0.2
"""Pause between asking again for an answer that is still being validated."""

PAGE: Final = 1000
"""Page size of the methods that fetch every page of a list."""

_ERROR_TYPES: Final[dict[Outcome, type[CommandError]]] = {
    Outcome.REJECTED: RejectedError,
    Outcome.CONFLICT: ConflictError,
    Outcome.NOT_FOUND: NotFoundError,
    Outcome.UNAVAILABLE: UnavailableError,
    Outcome.CLAIM_LOST: ClaimLostError,
}


@dataclass(frozen=True)
class Receipt:
    """A successful answer: the command committed (or the read succeeded).

    `body` is the server's receipt object, e.g. `{"runId": ..., "status": ..., "revision": ...}`;
    `receipt["runId"]` reads from it.
    """

    operation: str
    outcome: Outcome
    """`accepted` (done now) or `adopted` (a retry of a command that had committed before)."""
    revision: int | None
    """The run revision after the command, when it concerns a run."""
    body: JsonObject = field(default_factory=dict)
    idempotency_key: str | None = None
    """The key the command was sent with (None for reads); reuse it to retry safely."""

    @property
    def adopted(self) -> bool:
        """True when the server returned the stored receipt of an earlier, committed try."""
        return self.outcome is Outcome.ADOPTED

    def __getitem__(self, key: str) -> Any:
        return self.body[key]

    def get(self, key: str, default: Any = None) -> Any:
        """`body.get(key, default)`."""
        return self.body.get(key, default)


@dataclass(frozen=True)
class Call:
    """One operation a program asks its client to send (with the client's retries)."""

    operation: str
    payload: JsonObject = field(default_factory=dict)
    run_id: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True)
class Pause:
    """Wait this many seconds before the program goes on."""

    seconds: float


Program = Generator[Call | Pause, Any, T]
"""A client method as a generator: yields calls and pauses, receives receipts, returns the
method's result."""


def new_key() -> str:
    """A fresh idempotency key."""
    return f"key-{uuid.uuid4()}"


def receipt_of(operation: str, request: Request, response: Response) -> Receipt:
    """Turn a response into a receipt, or raise the `CommandError` its outcome names."""
    if response.outcome.ok:
        return Receipt(
            operation=operation,
            outcome=response.outcome,
            revision=response.revision,
            body=dict(response.receipt or {}),
            idempotency_key=request.idempotency_key,
        )
    error_type = _ERROR_TYPES[response.outcome]
    if response.error is not None:
        code, message = response.error.code, response.error.message
    else:
        code, message = str(response.outcome), f"{operation} was answered {response.outcome}"
    raise error_type(
        message,
        code=code,
        operation=operation,
        run_id=request.run_id,
        request_id=request.request_id,
        details=dict(response.receipt) if response.receipt else None,
    )


# -- the two drivers -----------------------------------------------------------------------


def run_blocking(program: Program[T], send: Callable[[Call], Receipt]) -> T:
    """Run `program`, sending each call with `send` and sleeping through each pause; a
    `CommandError` a call raises is raised inside the program (which may handle it)."""
    reply: Receipt | None = None
    refused: CommandError | None = None
    try:
        while True:
            step = program.send(reply) if refused is None else program.throw(refused)
            reply, refused = None, None
            if isinstance(step, Pause):
                time.sleep(step.seconds)
                continue
            try:
                reply = send(step)
            except CommandError as exc:
                refused = exc
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        program.close()


async def run_async(program: Program[T], send: Callable[[Call], Awaitable[Receipt]]) -> T:
    """Run `program`, awaiting each call sent with `send` and each pause (a `CommandError`
    is raised inside the program, as by `run_blocking`)."""
    reply: Receipt | None = None
    refused: CommandError | None = None
    try:
        while True:
            step = program.send(reply) if refused is None else program.throw(refused)
            reply, refused = None, None
            if isinstance(step, Pause):
                await _sleep(step.seconds)
                continue
            try:
                reply = await send(step)
            except CommandError as exc:
                refused = exc
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        program.close()


# -- building blocks ---------------------------------------------------------------------


def call(
    operation: str,
    payload: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    idempotency_key: str | None = None,
) -> Program[Receipt]:
    """Send one operation; its receipt."""
    receipt = yield Call(operation, dict(payload or {}), run_id, idempotency_key)
    assert isinstance(receipt, Receipt)
    return receipt


def body(operation: str, payload: Mapping[str, Any] | None = None) -> Program[JsonObject]:
    """Send one read; its receipt body as a new dict."""
    return dict((yield from call(operation, payload)).body)


def until_validated(
    operation: str, payload: JsonObject, run_id: str | None, key: str, wait: float | None
) -> Program[Receipt]:
    """Send an answer and ask again (same key, same payload) while the server says it is
    still `validating`, for at most `wait` seconds (None: until it settles)."""
    until = None if wait is None else time.monotonic() + wait
    while True:
        receipt = yield from call(operation, payload, run_id, key)
        if receipt.get("status") != "validating" or (
            until is not None and time.monotonic() >= until
        ):
            return receipt
        yield Pause(SUBMIT_POLL_SECONDS)


# -- workflows and runs ------------------------------------------------------------------


def list_workflows(project_dir: Path | str | None) -> Program[list[JsonObject]]:
    """`workflows.list` from `project_dir` (default: the project found from the cwd)."""
    payload: JsonObject = {}
    project = resolve_project(project_dir)
    if project is not None:
        payload["projectDir"] = str(project)
    return list((yield from call("workflows.list", payload)).body.get("workflows", []))


def start_run(
    workflow: str,
    run_input: Any,
    project_dir: Path | str | None,
    idempotency_key: str | None,
    origin_session: str | None,
    detached: bool,
    env: Mapping[str, str] | None = None,
    deadline: float | timedelta | None = None,
) -> Program[Receipt]:
    """`run.start`, with the workflow path and the project resolved from the cwd and the
    environment recorded from this process. An input over `INLINE_INPUT_BYTES` of canonical
    JSON is uploaded first (`upload`) and named by digest; if the server no longer holds it
    when the start arrives (the connection was lost in between), it is uploaded again once.

    Raises:
        InputTooLargeError: the input is over the 16 MiB bound (nothing is sent).
    """
    payload = start_payload(
        workflow, run_input, project_dir, origin_session, detached, env, deadline
    )
    return (yield from with_input("run.start", payload, None, idempotency_key))


def with_input(
    operation: str, payload: JsonObject, run_id: str | None, idempotency_key: str | None
) -> Program[Receipt]:
    """Send `operation` whose `payload` carries a run's `input`: inline up to
    `INLINE_INPUT_BYTES` of canonical JSON, else uploaded first (`upload`) and named by
    digest (`inputRef`); if the server no longer holds it when the command arrives (the
    connection was lost in between), it is uploaded again once.

    Raises:
        InputTooLargeError: the input is over the 16 MiB bound (nothing is sent).
    """
    try:
        data = canonical_json(payload["input"])
    except NotJsonError as exc:
        raise InvalidPayloadError(operation, "$.input" + exc.path[1:], exc.reason) from None
    if len(data) > MAX_INPUT_BYTES:
        raise InputTooLargeError(len(data))
    if len(data) <= INLINE_INPUT_BYTES:
        return (yield from call(operation, payload, run_id, idempotency_key))
    digest = sha256_hex(data)
    payload = {k: v for k, v in payload.items() if k != "input"}
    payload["inputRef"] = {"digest": digest, "bytes": len(data)}
    key = idempotency_key or new_key()  # the same for the command sent again after a re-upload
    for again in (False, True):
        yield from upload(data, digest)
        try:
            return (yield from call(operation, payload, run_id, key))
        except RejectedError as exc:
            if exc.code != "inputNotUploaded" or again:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def fork(
    run_id: str,
    node: str,
    visit: int | None,
    run_input: Any,
    session: str | None,
    detached: bool | None,
    idempotency_key: str | None,
    outputs: Mapping[str, Any] | None = None,
) -> Program[Receipt]:
    """`run.fork`; a new `input` (not None) is sent like `run.start`'s (`with_input`)."""
    payload = fork_payload(node, visit, run_input, session, detached, outputs)
    if run_input is None:
        return (yield from call("run.fork", payload, run_id, idempotency_key))
    return (yield from with_input("run.fork", payload, run_id, idempotency_key))


def upload(data: bytes, digest: str) -> Program[None]:
    """Send `data` (whose sha256 is `digest`) with `upload.put`, `UPLOAD_CHUNK_BYTES` at a
    time, each slice from where the server says it holds the upload up to; a connection
    lost meanwhile makes the server start over at 0 on the next one, so the upload does."""
    received = sent = 0
    while received < len(data):
        if sent > 4 * len(data):
            raise ServerProtocolError("the upload of the input makes no progress; try again")
        piece = data[received : received + UPLOAD_CHUNK_BYTES]
        payload: JsonObject = {
            "digest": digest,
            "bytes": len(data),
            "offset": received,
            "data": base64.b64encode(piece).decode("ascii"),
        }
        answer = (yield from call("upload.put", payload)).body
        sent += len(piece)
        received = int(answer.get("received", 0))


def list_runs(status: Iterable[str] | str | None, limit: int | None) -> Program[list[JsonObject]]:
    """`run.list`: one page of run summaries, newest first."""
    runs = (yield from call("run.list", list_payload(status, None, None, None, limit))).body
    return list(runs.get("runs", []))


def list_runs_page(
    status: Iterable[str] | str | None,
    workflow: str | None,
    since: int | None,
    after: str | None,
    limit: int | None,
    schedule: str | None = None,
    children: bool = False,
    parent: str | None = None,
    needs_person: bool = False,
) -> Program[tuple[list[JsonObject], str | None]]:
    """One page of `run.list` and the cursor of the next page, or None."""
    payload = list_payload(
        status, workflow, since, after, limit, schedule, children, parent, needs_person
    )
    page = (yield from call("run.list", payload)).body
    cursor = page.get("next")
    return list(page.get("runs", [])), None if cursor is None else str(cursor)


def count_runs(
    workflow: str | None,
    since: int | None,
    schedule: str | None,
    children: bool,
    parent: str | None,
    needs_person: bool,
) -> Program[dict[str, int]]:
    """`run.list` with `counts`: how many runs match the filters, per status."""
    payload = list_payload(None, workflow, since, None, 1, schedule, children, parent, needs_person)
    page = (yield from call("run.list", {**payload, "counts": True})).body
    counts = page.get("counts") or {}
    return {str(status): int(count) for status, count in counts.items()}


def fork_payload(
    node: str,
    visit: int | None,
    run_input: Any,
    session: str | None,
    detached: bool | None,
    outputs: Mapping[str, Any] | None = None,
) -> JsonObject:
    """The `run.fork` payload: `input` only when one replaces the source's (not None), `set`
    only when carried outputs are replaced."""
    payload: JsonObject = {"fromNode": node}
    if visit is not None:
        payload["visit"] = visit
    if run_input is not None:
        payload["input"] = run_input
    if outputs:
        payload["set"] = dict(outputs)
    if session is not None:
        payload["originSession"] = session
    if detached is not None:
        payload["detached"] = detached
    return payload


def placement_payload(session: str | None, detached: bool | None) -> JsonObject:
    """Where a new run of a fork or retry runs (`originSession`, `detached`), when given."""
    payload: JsonObject = {}
    if session is not None:
        payload["originSession"] = session
    if detached is not None:
        payload["detached"] = detached
    return payload


def list_lineage(run_id: str, limit: int | None) -> Program[list[JsonObject]]:
    """`run.list` with `lineage`: the runs that came from `run_id`."""
    payload: JsonObject = {"lineage": run_id}
    if limit is not None:
        payload["limit"] = limit
    runs = (yield from call("run.list", payload)).body
    return list(runs.get("runs", []))


def get_run(run_id: str) -> Program[JsonObject]:
    """`run.get`: the `RunView`."""
    run = (yield from call("run.get", None, run_id)).body.get("run")
    return dict(run) if isinstance(run, dict) else {}


def read_value(ref: Mapping[str, Any]) -> Program[Any]:
    """The value behind a `*Ref` (`{digest, bytes}`), read with `blob.read` in chunks and
    checked against its digest."""
    digest, size = str(ref["digest"]), int(ref["bytes"])
    data = bytearray()
    while len(data) < size:
        chunk = (yield from call("blob.read", {"digest": digest, "offset": len(data)})).body
        piece = base64.b64decode(str(chunk.get("data", "")))
        if not piece:
            break
        data += piece
    if len(data) != size or sha256_hex(data) != digest:
        raise ServerProtocolError(f"the stored value {digest} does not match its digest")
    return json.loads(data)


def get_run_complete(run_id: str) -> Program[JsonObject]:
    """`run.get` with every value sent by reference read in."""
    view = yield from get_run(run_id)
    for name in ("input", "output"):
        ref = view.get(f"{name}Ref")
        if isinstance(ref, dict):
            view[name] = yield from read_value(ref)
            view[f"{name}Ref"] = None
    return view


def final_output(run_id: str, view: Mapping[str, Any]) -> Program[Any]:
    """The output of an ended run's view (read in full when large), or `RunFailedError`."""
    status = str(view.get("status"))
    if status != "completed":
        raise RunFailedError(run_id, status, view.get("error"), dict(view))
    ref = view.get("outputRef")
    if isinstance(ref, dict):
        return (yield from read_value(ref))
    return view.get("output")


def answer_checkpoint(
    run_id: str,
    value: Any,
    request_id: str | None,
    idempotency_key: str | None,
    wait: float | None,
    child: str | None = None,
) -> Program[Receipt]:
    """`checkpoint.answer`, held until its validation settled (or `wait` passed)."""
    payload: JsonObject = {"value": value}
    if request_id is not None:
        payload["requestId"] = request_id
    if child is not None:
        payload["childRunId"] = child
    key = idempotency_key or new_key()
    return (yield from until_validated("checkpoint.answer", payload, run_id, key, wait))


def answer_decision(
    run_id: str,
    choice: str,
    request_id: str | None,
    idempotency_key: str | None,
    child: str | None = None,
    person: str | None = None,
) -> Program[Receipt]:
    """`decision.answer` (`person`: who answered on the seat, kept in the history)."""
    payload: JsonObject = {"choice": choice}
    if person is not None:
        payload["person"] = person
    if request_id is not None:
        payload["requestId"] = request_id
    if child is not None:
        payload["childRunId"] = child
    return (yield from call("decision.answer", payload, run_id, idempotency_key))


def signal_payload(name: str, data: Any, idempotency_key: str | None) -> JsonObject:
    """The payload of `run.signal`: the event's name and data, and the sender's key (the
    server dedupes events per run by it, whoever sends them)."""
    payload: JsonObject = {"name": name, "data": data}
    if idempotency_key is not None:
        payload["key"] = idempotency_key
    return payload


def settings_payload(patch: list[Any], expect_change: int | None) -> JsonObject:
    """The payload of `run.changeSettings`: the patch, and the change number it expects."""
    payload: JsonObject = {"patch": patch}
    if expect_change is not None:
        payload["expectChange"] = expect_change
    return payload


def history(run_id: str, after: int, limit: int | None) -> Program[list[JsonObject]]:
    """The run's events after revision `after`, oldest first (every page, or `limit`)."""
    events: list[JsonObject] = []
    while True:
        want = None if limit is None else min(PAGE, limit - len(events))
        page = (yield from call("run.history", history_payload(after, want), run_id)).body
        events.extend(page.get("events", []))
        cursor = page.get("next")
        if cursor is None or (limit is not None and len(events) >= limit):
            return events
        after = int(cursor)


def logs(run_id: str, node: str | None) -> Program[list[JsonObject]]:
    """Every attempt's captured output (of one `node`), oldest first."""
    found: list[JsonObject] = []
    after = 0
    while True:
        page = (yield from call("run.logs", logs_payload(node, after), run_id)).body
        found.extend(page.get("logs", []))
        cursor = page.get("next")
        if cursor is None:
            return found
        after = int(cursor)


def node_output(run_id: str, node: str) -> Program[JsonObject]:
    """`run.output`, with an output sent by reference read in."""
    found = dict((yield from call("run.output", {"nodeId": node}, run_id)).body)
    ref = found.get("outputRef")
    if isinstance(ref, dict):
        found["output"] = yield from read_value(ref)
        found["outputRef"] = None
    return found


VALUE_HOLD_SECONDS: Final = 20.0
"""Longest one `run.value` request asks the server to hold (its `MAX_HOLD_MS`)."""

_ENDED: Final = frozenset({"completed", "failed", "timed_out", "cancelled"})


def published_value(run_id: str, key: str, wait: float | None, hold: float) -> Program[JsonObject]:
    """`run.value`: the run's latest value of `key` (`{runId, key, value, version, ...}`),
    waiting up to `wait` seconds for it to be published (None or 0: not at all). Each
    request is held by the server at most `hold` seconds; the program asks again until
    `wait` is over or the run has ended."""
    until = time.monotonic() + (wait or 0.0)
    hold = max(0.0, min(hold, VALUE_HOLD_SECONDS))
    while True:
        left = max(0.0, until - time.monotonic())
        payload = {"key": key, "waitMs": int(min(left, hold) * 1000)}
        try:
            return dict((yield from call("run.value", payload, run_id)).body)
        except NotFoundError as exc:
            ended = (exc.details or {}).get("runStatus") in _ENDED
            if exc.code != "valueNotPublished" or ended or time.monotonic() >= until:
                raise


def show_workflow(workflow: str, project: Path | str | None) -> Program[JsonObject]:
    """`workflows.show`, with the workflow path and the project resolved from the cwd."""
    payload: JsonObject = {"workflow": workflow_spec(workflow)}
    found = resolve_project(project)
    if found is not None:
        payload["projectDir"] = str(found)
    return (yield from body("workflows.show", payload))


def check_workflow(path: Path | str, project: Path | str | None = None) -> Program[JsonObject]:
    """`workflows.check` of `path` made absolute, in `project` (made absolute) or, without
    one, in the file's own project: the nearest directory from the file's folder upwards
    that contains `.pi/workflows` (so a sibling named by `fan_out` or `subworkflow` is
    found, as `run start PATH` finds it)."""
    payload: JsonObject = {"path": absolute(path)}
    found = (
        resolve_project(project)
        if project is not None
        else find_project(Path(payload["path"]).parent)
    )
    if found is not None:
        payload["projectDir"] = str(found)
    return (yield from body("workflows.check", payload))


def prune(older_than_ms: int, backup: Path | str | bool) -> Program[JsonObject]:
    """`state.prune` (a backup path is made absolute)."""
    chosen: str | bool = backup if isinstance(backup, bool) else absolute(backup)
    return (yield from body("state.prune", {"olderThanMs": older_than_ms, "backup": chosen}))


# -- effects and state -------------------------------------------------------------------


def list_effects(run_id: str | None) -> Program[list[JsonObject]]:
    """`effect.list` of one run or of every run, every page."""
    found: list[JsonObject] = []
    payload: JsonObject = {"limit": PAGE}
    while True:
        page = (yield from call("effect.list", payload, run_id)).body
        found.extend(page.get("effects", []))
        cursor = page.get("next")
        if cursor is None:
            return found
        payload = {"limit": PAGE, "after": cursor}


def resolve_effect(
    effect_id: str,
    resolution: str,
    result: Any,
    reason: str | None,
    idempotency_key: str | None,
) -> Program[Receipt]:
    """`effect.resolve`."""
    payload: JsonObject = {"effectId": effect_id, "resolution": resolution}
    if result is not None:
        payload["result"] = result
    if reason is not None:
        payload["reason"] = reason
    return (yield from call("effect.resolve", payload, None, idempotency_key))


def get_effect(effect_id: str) -> Program[JsonObject]:
    """`effect.get`: one effect, with the evidence its runner left when it is ambiguous."""
    return dict((yield from call("effect.get", {"effectId": effect_id})).body.get("effect", {}))


def resolve_effect_from_evidence(effect_id: str, idempotency_key: str | None) -> Program[Receipt]:
    """`effect.resolve` with `fromEvidence`: as the evidence its runner left says."""
    payload: JsonObject = {"effectId": effect_id, "fromEvidence": True}
    return (yield from call("effect.resolve", payload, None, idempotency_key))


def diagnose(full: bool = False) -> Program[list[JsonObject]]:
    """`state.diagnose`: the problems (with `full`, SQLite's whole integrity check)."""
    payload: JsonObject = {"full": True} if full else {}
    return list((yield from call("state.diagnose", payload)).body.get("problems", []))


# -- interactions and sessions ---------------------------------------------------------


def submit(
    request_id: str,
    output: Any,
    run_id: str | None,
    idempotency_key: str | None,
    wait: float | None,
) -> Program[Receipt]:
    """`interaction.submit`, held until its validation settled (or `wait` passed)."""
    payload: JsonObject = {"requestId": request_id, "output": output}
    key = idempotency_key or new_key()
    return (yield from until_validated("interaction.submit", payload, run_id, key, wait))


def list_interactions(session_id: str | None) -> Program[list[JsonObject]]:
    """`interaction.list`: open requests, oldest first."""
    payload: JsonObject = {} if session_id is None else {"sessionId": session_id}
    return list((yield from call("interaction.list", payload)).body.get("interactions", []))


def attach_session(
    session_id: str, idempotency_key: str | None, seat_id: str | None = None
) -> Program[int]:
    """`session.attach` as seat `seat_id` (one id per coordinator incarnation; none: a new
    seat at every attach): the new coordinator epoch."""
    payload: JsonObject = {"sessionId": session_id}
    if seat_id is not None:
        payload["seatId"] = seat_id
    receipt = yield from call("session.attach", payload, None, idempotency_key)
    return int(receipt["coordinatorEpoch"])


def get_session(session_id: str) -> Program[JsonObject]:
    """`session.get`: the session's view."""
    found = (yield from call("session.get", {"sessionId": session_id})).body
    return dict(found.get("session", {}))


def message_text(message_id: str) -> Program[str]:
    """`workflowMessage.get`, slice after slice: a workflow message's whole text (a view
    carries a long one cut, with `textTruncated`); checked against its `textBytes`."""
    parts: list[str] = []
    offset: int | None = 0
    total = 0
    while offset is not None:
        payload: JsonObject = {"workflowMessageId": message_id, "offset": offset}
        found = yield from body("workflowMessage.get", payload)
        parts.append(str(found["text"]))
        total = int(found["textBytes"])
        next_offset = found.get("next")
        offset = int(next_offset) if next_offset is not None else None
    text = "".join(parts)
    if len(text.encode("utf-8")) != total:
        raise ServerProtocolError(f"the text of message {message_id} does not match its size")
    return text


def report_messages(
    session_id: str, epoch: int, present: Mapping[str, str], idle: bool
) -> Program[JsonObject]:
    """`workflowMessage.report`."""
    payload: JsonObject = {
        "sessionId": session_id,
        "coordinatorEpoch": epoch,
        "present": [{"workflowMessageId": m, "entryId": e} for m, e in present.items()],
        "idle": idle,
    }
    return (yield from body("workflowMessage.report", payload))


def report_turn(
    session_id: str,
    epoch: int,
    event: str,
    stop_reason: str | None,
    workflow_message_id: str | None,
    error_message: str | None = None,
) -> Program[JsonObject]:
    """`workflowTurn.report`."""
    payload: JsonObject = {"sessionId": session_id, "coordinatorEpoch": epoch, "event": event}
    if stop_reason is not None:
        payload["stopReason"] = stop_reason
    if workflow_message_id is not None:
        payload["workflowMessageId"] = workflow_message_id
    if error_message is not None:
        payload["errorMessage"] = error_message
    return (yield from body("workflowTurn.report", payload))


async def _sleep(seconds: float) -> None:
    """``asyncio.sleep``, imported on first use: the blocking client never loads asyncio."""
    import asyncio  # noqa: PLC0415 - see above

    await asyncio.sleep(seconds)
