"""What the state database says happened, read once at the end of a seed (read-only).

Runs in the campaign driver, after the seed's last `server stop`. The oracle's attribution
(`attribution.py`) needs facts no public surface lists in full: how every runner ended
(`run_runners.outcome`, with its pid, server epoch and times), every effect attempt whose
outcome was lost (`effect_attempts.status = 'lost'`: a manual one made its effect
ambiguous, an idempotent one ran again), every park and pause with its reason (`events`),
every workflow message with its delivery (`workflow_messages`) and every follow-up prompt
(`run_follow_ups`), for the durable-time
checks every node attempt, durable wait and event (and every event a run sent another,
`effects` of type `signal:<key>`), and for the composition checks every
run's place in its tree and its joins (`children.joined`). The database is opened with `mode=ro`;
nothing is written.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunnerExit:
    """One runner child and how it ended."""

    run_id: str
    runner_epoch: int
    generation: int
    server_epoch: int
    pid: int | None
    outcome: str | None
    exit_code: int | None
    exit_signal: int | None
    created_at: int
    exited_at: int | None


@dataclass(frozen=True)
class LostEffect:
    """One execution of an effect body whose outcome nobody knows."""

    run_id: str
    effect_key: str
    kind: str  # "manual" or "idempotent"
    node_id: str
    attempt_no: int
    started_at: int
    finished_at: int


@dataclass(frozen=True)
class Park:
    """A run paused or parked, with its reason."""

    run_id: str
    at: int
    reason: str
    detail: str


@dataclass(frozen=True)
class Message:
    """A workflow message and its delivery."""

    message_id: str
    run_id: str
    kind: str
    status: str
    entry_id: str | None
    session: str | None
    detached: bool


@dataclass(frozen=True)
class FollowUpRow:
    """A follow-up prompt queued on a run (`run_follow_ups`), with its message if any."""

    follow_up_id: str
    run_id: str
    seq: int
    status: str
    message_id: str | None


@dataclass(frozen=True)
class AttemptRow:
    """One node attempt, oldest first within its run."""

    run_id: str
    round: int
    node_id: str
    visit: int
    attempt_no: int
    try_no: int
    status: str
    attempt_id: str
    settings_change: int | None = 0  # the run's settings change it started with


@dataclass(frozen=True)
class WaitRow:
    """One durable wait (sleep, retry delay, event wait) and how it ended."""

    run_id: str
    wait_id: str
    kind: str
    status: str
    due_at: int | None
    fired_at: int | None
    created_at: int


@dataclass(frozen=True)
class SignalRow:
    """One event sent to a run, and what became of it."""

    run_id: str
    signal_id: str
    seq: int
    data: Any
    status: str
    attempt_id: str | None
    idempotency_key: str | None


@dataclass(frozen=True)
class SentSignal:
    """One event a run's node sent another (`ctx.signal`): a managed effect of the sender,
    type `signal:<key>`, whose result names the event (`{runId, signalId, seq}`)."""

    run_id: str  # the sender
    effect_key: str  # also the target's idempotency key of the event
    effect_type: str
    status: str
    result: Any


@dataclass(frozen=True)
class ScheduleRow:
    """One schedule: its cadence and life."""

    schedule_id: str
    name: str
    every_ms: int | None
    anchor_at: int
    overlap: str
    catchup: str
    status: str
    created_at: int
    deleted_at: int | None


@dataclass(frozen=True)
class FireRow:
    """One fire time of a schedule and what it did."""

    schedule_id: str
    fire_at: int
    outcome: str
    run_id: str | None
    missed: int
    missed_until: int | None


@dataclass(frozen=True)
class ScheduledRun:
    """A run a schedule started, with its provenance and life."""

    run_id: str
    schedule_id: str
    fire_at: int
    status: str
    created_at: int
    finished_at: int | None


@dataclass(frozen=True)
class RunRow:
    """One run, with its place in its tree."""

    run_id: str
    workflow: str
    parent_run_id: str | None
    root_run_id: str  # itself for a root run
    status: str


@dataclass
class Ledger:
    """The facts of one seed's database."""

    runners: list[RunnerExit] = field(default_factory=list)
    lost: list[LostEffect] = field(default_factory=list)
    parks: list[Park] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    follow_ups: list[FollowUpRow] = field(default_factory=list)
    # (run id, change number) -> the settings document that change made (`run_settings`).
    settings: dict[tuple[str, int], Any] = field(default_factory=dict)
    attempts: list[AttemptRow] = field(default_factory=list)
    waits: list[WaitRow] = field(default_factory=list)
    signals: list[SignalRow] = field(default_factory=list)
    sent: list[SentSignal] = field(default_factory=list)  # events runs sent runs
    schedules: list[ScheduleRow] = field(default_factory=list)
    fires: list[FireRow] = field(default_factory=list)
    scheduled_runs: list[ScheduledRun] = field(default_factory=list)
    runs: dict[str, RunRow] = field(default_factory=dict)
    joins: dict[str, int] = field(default_factory=dict)  # run id -> its `children.joined`
    # A rate-limited join (`fan_out(rate=...)`): wait id -> (parent run id, starts allowed,
    # period ms, its children's start times in order).
    paced: dict[str, tuple[str, int, int, list[int]]] = field(default_factory=dict)
    error: str | None = None

    def has_settings(self, run_id: str) -> bool:
        """Whether the run ever had live settings (its workflow declared them)."""
        return (run_id, 0) in self.settings

    def root_of(self, run_id: str) -> str:
        """The root of a run's tree (the run itself when it is a root, or unknown)."""
        row = self.runs.get(run_id)
        return run_id if row is None else row.root_run_id


def read(database: Path) -> Ledger:
    """Read the facts (an unreadable database is reported as `error`)."""
    ledger = Ledger()
    try:
        conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        ledger.error = str(exc)
        return ledger
    try:
        _read(conn, ledger)
    except sqlite3.Error as exc:
        ledger.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    return ledger


def _read(conn: sqlite3.Connection, ledger: Ledger) -> None:
    for row in conn.execute(
        "SELECT run_id, runner_epoch, generation, server_epoch, pid, outcome, exit_code,"
        " exit_signal, created_at, exited_at FROM run_runners ORDER BY runner_epoch"
    ):
        ledger.runners.append(RunnerExit(*row))
    for row in conn.execute(
        "SELECT e.run_id, e.effect_key, e.effect_kind, e.node_id, a.attempt_no, a.started_at,"
        " COALESCE(a.finished_at, a.started_at) FROM effect_attempts a JOIN effects e"
        " USING (effect_id) WHERE a.status = 'lost' ORDER BY a.started_at"
    ):
        ledger.lost.append(LostEffect(*row))
    # Every move into `paused`, whatever event made it: `run.parked` and `run.paused` carry
    # their reason; a recovery, or a node deadline, that found a manual effect applying parks
    # `effectAmbiguous` (`takeover.recover`, `takeover.time_out_node`).
    previous: dict[str, str] = {}
    for run_id, at, event_type, status, data in conn.execute(
        "SELECT run_id, at, type, run_status, data_json FROM events ORDER BY run_id, revision"
    ):
        if status == "paused" and previous.get(run_id) != "paused":
            parsed = _json(data)
            reason = parsed.get("reason") or (
                "effectAmbiguous"
                if event_type in ("run.recovered", "node.timedOut")
                else f"({event_type})"
            )
            detail = str(parsed.get("detail") or "")
            ledger.parks.append(Park(run_id, at, str(reason), detail))
        previous[run_id] = status
    ledger.parks.sort(key=lambda park: park.at)
    for row in conn.execute(
        "SELECT m.message_id, m.run_id, m.kind, m.status, m.entry_id, m.origin_session,"
        " r.execution_mode = 'detached' FROM workflow_messages m JOIN runs r USING (run_id)"
        " ORDER BY m.created_at, m.rowid"
    ):
        ledger.messages.append(
            Message(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]))
        )
    for run_id, number, document in conn.execute(
        "SELECT run_id, change_no, settings_json FROM run_settings"
    ):
        ledger.settings[(run_id, number)] = _json(document) if document else None
    for row in conn.execute(
        "SELECT follow_up_id, run_id, seq, status, message_id FROM run_follow_ups"
        " ORDER BY run_id, seq"
    ):
        ledger.follow_ups.append(FollowUpRow(*row))
    for row in conn.execute(
        "SELECT run_id, round, node_id, visit, attempt_no, try_no, status, attempt_id,"
        " settings_change"
        " FROM node_attempts ORDER BY run_id, started_at, rowid"
    ):
        ledger.attempts.append(AttemptRow(*row))
    for row in conn.execute(
        "SELECT run_id, wait_id, kind, status, due_at, fired_at, created_at FROM run_waits"
        " ORDER BY run_id, created_at, rowid"
    ):
        ledger.waits.append(WaitRow(*row))
    for run_id, signal_id, seq, data, status, attempt_id, key in conn.execute(
        "SELECT run_id, signal_id, seq, data_json, status, attempt_id, idempotency_key"
        " FROM run_signals ORDER BY run_id, seq"
    ):
        value = json.loads(data) if data else None
        ledger.signals.append(SignalRow(run_id, signal_id, seq, value, status, attempt_id, key))
    for run_id, key, effect_type, status, result in conn.execute(
        "SELECT run_id, effect_key, effect_type, status, result_json FROM effects"
        " WHERE effect_type LIKE 'signal:%' ORDER BY run_id, created_at"
    ):
        ledger.sent.append(SentSignal(run_id, key, effect_type, status, _json(result)))
    for row in conn.execute(
        "SELECT schedule_id, name, every_ms, anchor_at, overlap, catchup, status, created_at,"
        " deleted_at FROM schedules ORDER BY created_at"
    ):
        ledger.schedules.append(ScheduleRow(*row))
    for row in conn.execute(
        "SELECT schedule_id, fire_at, outcome, run_id, missed, missed_until FROM schedule_fires"
        " ORDER BY schedule_id, fire_at"
    ):
        ledger.fires.append(FireRow(*row))
    for row in conn.execute(
        "SELECT run_id, schedule_id, schedule_fire_at, status, created_at, finished_at FROM runs"
        " WHERE schedule_id IS NOT NULL ORDER BY created_at"
    ):
        ledger.scheduled_runs.append(ScheduledRun(*row))
    for row in conn.execute(
        "SELECT run_id, workflow_name, parent_run_id, COALESCE(root_run_id, run_id), status"
        " FROM runs ORDER BY created_at"
    ):
        ledger.runs[row[0]] = RunRow(*row)
    for wait_id, parent, count, period, started in conn.execute(
        "SELECT j.wait_id, j.parent_run_id, j.rate_count, j.rate_period_ms, c.started_at"
        " FROM run_joins j JOIN run_children c USING (wait_id) WHERE j.rate_count IS NOT NULL"
        " AND c.started_at IS NOT NULL ORDER BY c.started_at"
    ):
        ledger.paced.setdefault(wait_id, (parent, count, period, []))[3].append(started)
    for run_id, count in conn.execute(
        "SELECT run_id, COUNT(*) FROM events WHERE type = 'children.joined' GROUP BY run_id"
    ):
        ledger.joins[run_id] = count


def _json(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
