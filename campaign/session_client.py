"""A scripted session client: what the Pi extension's session coordinator does, without Pi.

Runs as its own process, so that a `killSession` or `killAgent` fault is a real SIGKILL:

- `python -m campaign.session_client --home H --session S --record FILE` is the client of an
  origin session (role `session`): the operator still answers the runs' steps;
- as `$PI_WORKFLOWS_PI` (the seed's `bin/pi` wrapper calls `pi_main`) it is the headless
  agent of a detached run (role `agent`): Pi started by the server with `--mode rpc
  --session-id detached-<run> --session-dir DIR`, whose "model" also submits the agent step.

Like the extension (docs/pi.md, "How it works") it attaches as its seat (one seat id per
process, as one Pi process's coordinator: a restarted client is a new seat and fences its
dead predecessor, whose open turn the server ends `lost` and whose step it presents again;
a reconnect of the same process keeps its turn), reports the whole branch before it sends
anything (`idle` only while it has no turn open), watches the session, and for each message
of a pushed view: appends it to its branch, then reports it present
(`workflowMessage.report`); a step starts a model turn (`workflowTurn.report` `started`),
ended `completed` once its request is no longer the active one; a run's result gets one
presentation turn. As in Pi, a transcript entry is no turn: a headless agent's "model"
works only on a step this process presented (a turn it started), never on one it merely
finds in its branch. While the active agent step is
`validating` it reports progress (`interaction.update`), as a model does with the
`workflow` tool's `update` action. When the connection or the server goes away it
reconnects with a backoff (0.1 s doubling to 2 s) and attaches again.

The record file is the session's branch and this client's log, one JSON object a line,
appended with one `write` each: `present` lines are the branch (what the session holds;
read back by the next incarnation and by the oracle), the others say what it reported,
updated, submitted, and any `problem` it saw (the oracle turns those into violations).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

from pi_workflows.client import Client
from pi_workflows.client.errors import ClientError, CommandError

RECORD_NAME: Final = "campaign-session.jsonl"
"""The record file of a headless agent, in its session directory."""

DEADLINE_PASSED: Final = "the step's deadline passed before the submission was validated"
VALIDATION_MESSAGE: Final = "score must be twice the item"
SCORE: Final = re.compile(r"Score item (\d+)")


class Record:
    """The append-only record (and branch) of one session."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.branch: dict[str, str] = {}  # workflow message id -> entry id
        self.texts: dict[str, str] = {}  # workflow message id -> its text (the model reads it)
        self.entries = 0
        self.lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            data = path.read_bytes()
            for line in data.splitlines():
                entry = _parse(line)
                if entry and entry.get("e") == "present":
                    self.branch[str(entry["msg"])] = str(entry["entry"])
                    self.texts[str(entry["msg"])] = str(entry.get("text") or "")
            if data and not data.endswith(b"\n"):
                self._write(b"\n")  # a predecessor killed mid-line: start a fresh line

    def _write(self, raw: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, raw)
        finally:
            os.close(fd)

    def add(self, what: str, /, **fields: Any) -> None:
        """Append one line."""
        line = {"e": what, "t": round(time.time() * 1000), "pid": os.getpid(), **fields}
        with self.lock:
            self._write((json.dumps(line, sort_keys=True, default=str) + "\n").encode())

    def present(self, message: dict[str, Any]) -> str:
        """Add a workflow message to the branch; its entry id."""
        self.entries += 1
        entry = f"entry-{os.getpid()}-{self.entries}"
        message_id = str(message["workflowMessageId"])
        text = str(message.get("text") or "")[:2000]
        self.add(
            "present",
            msg=message_id,
            entry=entry,
            kind=message.get("kind"),
            run=message.get("runId"),
            resumed=bool(message.get("resumed")),
            text=text,
        )
        self.branch[message_id] = entry
        self.texts[message_id] = text
        return entry


def read_record(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a record file (for the oracle)."""
    try:
        data = path.read_bytes()
    except OSError:
        return []
    return [entry for entry in (_parse(line) for line in data.splitlines()) if entry]


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class FencedError(Exception):
    """Another client attached to the session: this one stops for good."""


class SessionClient:
    """One incarnation of a session's client."""

    def __init__(self, home: Path, session: str, record: Record, *, role: str, seed: int) -> None:
        self.home = home
        self.session = session
        self.record = record
        self.role = role
        self.seed = seed
        self.client_id = f"campaign-{role}-{session}"
        self.client: Client | None = None
        self.epoch = 0
        self.turn: tuple[str, str | None] | None = None  # (message id, request id)
        self.updated: set[tuple[str, int]] = set()  # (request id, validating phase)
        self.phase: dict[str, int] = {}  # request id -> validating phases seen
        self.last_status: dict[str, str] = {}
        self.submitting: set[str] = set()  # requests a worker submits for (role agent)
        self.seat = f"campaign-{role}-{os.getpid()}-{time.monotonic_ns()}"
        self.worked: set[str] = set()  # step messages this process presented (its turns)

    # --- the connection -----------------------------------------------------------------

    def run_forever(self) -> None:
        """Attach, report, watch and present; reconnect after every loss; stop if fenced."""
        backoff = 0.1
        while True:
            try:
                self._session()
            except FencedError:
                self.record.add("fenced", epoch=self.epoch)
                return
            except (ClientError, OSError, ValueError) as exc:
                self.record.add("disconnected", error=f"{type(exc).__name__}: {exc}"[:300])
            if self.client is not None:
                self.client.close()
                self.client = None
            # This process lives on: a turn it had open goes on (reported when it ends), as
            # in a Pi whose server restarted.
            time.sleep(backoff)
            backoff = min(2.0, backoff * 2)

    def _session(self) -> None:
        client = Client(self.home, client_id=self.client_id, autostart=False, timeout=15.0)
        self.client = client
        self.epoch = client.attach_session(self.session, seat_id=self.seat)
        self.record.add("attach", epoch=self.epoch, seat=self.seat)
        self._report(dict(self.record.branch), idle=self.turn is None)
        watch = client.watch_session(self.session, self.epoch)
        try:
            while True:
                view = watch.next_view(1.0)
                if watch.fenced:
                    raise FencedError
                if view is not None:
                    self._present(view)
        finally:
            watch.close()

    def _report(self, present: dict[str, str], *, idle: bool) -> None:
        assert self.client is not None
        try:
            answer = self.client.report_messages(self.session, self.epoch, present, idle=idle)
        except CommandError as exc:
            if exc.code == "coordinatorFencedError":
                raise FencedError from None
            raise
        self.record.add(
            "reported",
            present=sorted(present),
            sent=answer.get("sent", []),
            resumed=answer.get("resumed", []),
            idle=idle,
            epoch=self.epoch,
        )

    def _turn(self, event: str, message_id: str | None, stop_reason: str | None = None) -> None:
        assert self.client is not None
        try:
            self.client.report_turn(
                self.session,
                self.epoch,
                event,
                stop_reason=stop_reason,
                workflow_message_id=message_id,
            )
        except CommandError as exc:
            if exc.code == "coordinatorFencedError":
                raise FencedError from None
            raise
        self.record.add("turn", event=event, msg=message_id, stop=stop_reason)

    # --- presenting ---------------------------------------------------------------------

    def _present(self, view: dict[str, Any]) -> None:
        active = view.get("activeRequest") or None
        if self.turn is not None and (active is None or active.get("requestId") != self.turn[1]):
            self._end_turn_if_answered()
        for message in view.get("messages") or []:
            message_id = str(message["workflowMessageId"])
            entry = self.record.branch.get(message_id)
            new = entry is None
            if entry is None:
                entry = self.record.present(message)
            # Reported at once (also again, when an earlier report was lost with its reply).
            self._report({message_id: entry}, idle=False)
            if not new:
                continue
            kind = message.get("kind")
            if kind == "step" and active is not None:
                # A turn still open (its request waits in a paused run) is ended `lost` by
                # the server when this one starts: never `completed` without a submission.
                self._turn("started", message_id)
                self.turn = (message_id, active.get("requestId"))
                self.worked.add(message_id)
            elif kind == "terminal" and self.turn is None:
                self._turn("started", message_id)  # the result's one presentation turn
                self._turn("ended", message_id, "completed")
        if active is not None:
            self._on_active(active)

    def _end_turn_if_answered(self) -> None:
        """End the open step turn `completed` once its request is closed (the model's turn
        ends with its submission; ending it earlier would earn the step a reminder)."""
        assert self.client is not None
        assert self.turn is not None
        request_id = self.turn[1]
        open_ids = {str(i.get("requestId")) for i in self.client.list_interactions(self.session)}
        if request_id not in open_ids:
            self._turn("ended", self.turn[0], "completed")
            self.turn = None

    def _on_active(self, active: dict[str, Any]) -> None:
        request_id = str(active.get("requestId"))
        status = str(active.get("status"))
        if status == "validating" and self.last_status.get(request_id) != "validating":
            self.phase[request_id] = self.phase.get(request_id, 0) + 1
        self.last_status[request_id] = status
        if active.get("kind") != "agent":
            return
        if status == "validating":
            self._update(request_id, self.phase.get(request_id, 1))
        elif (
            self.role == "agent"
            and status == "pending"
            and request_id not in self.submitting
            and active.get("workflowMessageId") in self.worked
        ):
            self.submitting.add(request_id)
            text = self.record.texts.get(str(active.get("workflowMessageId")), "")
            worker = threading.Thread(target=self._submit, args=(request_id, text), daemon=True)
            worker.start()

    def _update(self, request_id: str, phase: int) -> None:
        """Progress on a step under validation (the model's `update` tool action)."""
        if (request_id, phase) in self.updated:
            return
        self.updated.add((request_id, phase))
        assert self.client is not None
        body = {"progress": phase, "note": "still checking"}
        try:
            receipt = self.client.update(
                request_id, body, idempotency_key=f"update-{request_id}-{phase}"
            )
        except CommandError as exc:
            # The request may have closed meanwhile (accepted, rejected, timed out).
            self.record.add("update", request=request_id, ok=False, code=exc.code)
            return
        self.record.add("update", request=request_id, ok=True, revision=receipt.get("revision"))

    # --- the model of a headless agent --------------------------------------------------

    def _submit(self, request_id: str, text: str) -> None:
        """The agent's model: maybe a wrong output first, then the right one."""
        found = SCORE.search(text)
        if found is None:
            self.record.add("problem", message=f"step {request_id} has no item in {text[:200]!r}")
            return
        x = int(found.group(1))
        rng = random.Random(f"{self.seed}:agent:{request_id}")  # noqa: S311 - a reproducible campaign
        delay = rng.uniform(0.0, 1.5)
        time.sleep(delay)
        if rng.random() < 0.4:
            outcome = self._send(request_id, {"score": 2 * x + 1}, "wrong")
            if outcome == "accepted":
                self.record.add("problem", message=f"a wrong output of {request_id} was accepted")
                return
        for attempt in range(6):
            outcome = self._send(request_id, {"score": 2 * x}, f"valid-{attempt}")
            if outcome != "retry":
                return

    def _send(self, request_id: str, output: dict[str, Any], name: str) -> str:
        """One submission, its connection losses retried with its key: `accepted`,
        `refused`, or `retry` (its validation was cut short: submit again)."""
        key = f"agent-{request_id}-{name}"
        self.record.add("sending", request=request_id, name=name, output=output)
        with Client(self.home, client_id=self.client_id, autostart=False, timeout=15.0) as client:
            deadline = time.monotonic() + 120.0
            while True:
                try:
                    receipt = client.submit(request_id, output, idempotency_key=key, wait=60.0)
                except CommandError as exc:
                    return self._refused(request_id, name, exc)
                except ClientError as exc:
                    if time.monotonic() > deadline:
                        self.record.add("problem", message=f"submit {key} got no answer: {exc}")
                        return "refused"
                    client.close()
                    time.sleep(0.5)
                    continue
                status = str(receipt.get("status"))
                if status == "validating":
                    continue  # still validating after the server's bound: ask again
                self.record.add("submit", request=request_id, name=name, status=status)
                return "accepted"

    def _refused(self, request_id: str, name: str, exc: CommandError) -> str:
        message = exc.message.removeprefix(f"{exc.code}: ")
        self.record.add("submit", request=request_id, name=name, status=exc.code, message=message)
        if exc.code != "validationRejected":
            return "refused"  # the request closed (deadline, cancel, pause): nothing to do
        if message.startswith("validation did not finish"):
            return "retry"
        if name == "wrong":
            if message not in (VALIDATION_MESSAGE, DEADLINE_PASSED):
                self.record.add("problem", message=f"a wrong output came back as {message!r}")
            return "refused"
        if message != DEADLINE_PASSED:
            self.record.add("problem", message=f"a valid output was rejected: {message}")
        return "refused"


def _exit_on_signal(signum: int, frame: object) -> None:
    os._exit(0)


def _exit_at_stdin_end() -> None:
    """A headless agent's server holds its stdin: its end means the server is gone."""
    with contextlib.suppress(OSError):
        while sys.stdin.buffer.read(65536):
            pass
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    """The client of one origin session (role `session`)."""
    parser = argparse.ArgumentParser(prog="python -m campaign.session_client")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--session", required=True)
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    record = Record(args.record)
    record.add("start", role="session")
    SessionClient(args.home, args.session, record, role="session", seed=args.seed).run_forever()
    return 0


def pi_main(argv: list[str]) -> int:
    """The headless agent of a detached run, started by the server as `pi --mode rpc ...`."""
    parser = argparse.ArgumentParser(prog="pi")
    parser.add_argument("--mode")
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--session-dir", type=Path, required=True)
    parser.add_argument("--no-extensions", action="store_true")
    parser.add_argument("-e", "--extension", action="append", default=[])
    args, _ = parser.parse_known_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    threading.Thread(target=_exit_at_stdin_end, daemon=True).start()
    home = Path(os.environ["PI_WORKFLOWS_HOME"])
    seed = int(os.environ.get("CAMPAIGN_SEED", "0"))
    record = Record(args.session_dir / RECORD_NAME)
    record.add("start", role="agent", argv=argv)
    if args.mode != "rpc" or not args.no_extensions or not args.extension:
        record.add("problem", message=f"the headless agent was started with {argv}")
    SessionClient(home, args.session_id, record, role="agent", seed=seed).run_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
