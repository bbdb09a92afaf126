"""Diagnosis of contradictory rows, and a repair limited to exact durable evidence.

``diagnose`` only reads. ``repair`` changes only what the canonical rows prove (a stale
projection, a claim held by a run that is not running, an attempt left open by a finished
run, ...), records each fix as a ``state.repaired`` event, never invents successful work,
and leaves untouched every run that also has a problem it cannot fix exactly.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pi_workflows.store import attempts, delivery, diagnose_tree, effects, interactions, waits
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.projection import expected_view, project_run, stored_view
from pi_workflows.store.runs import RunRow, write_run
from pi_workflows.store.states import QUEUE_STATUS_OF, TERMINAL_STATUSES, RunStatus
from pi_workflows.store.takeover import recover


@dataclass(frozen=True)
class Problem:
    """One contradiction. ``repairable`` when ``repair`` can fix it from exact evidence."""

    code: str
    run_id: str | None
    message: str
    repairable: bool

    def to_json(self) -> dict[str, Any]:
        """The wire form (camelCase keys)."""
        return {
            "code": self.code,
            "runId": self.run_id,
            "message": self.message,
            "repairable": self.repairable,
        }


@dataclass
class RepairReport:
    """What ``repair`` fixed and what it left for a person."""

    fixed: list[Problem] = field(default_factory=list)
    remaining: list[Problem] = field(default_factory=list)


def _runs(conn: sqlite3.Connection) -> dict[str, tuple[RunStatus, int, int | None]]:
    return {
        row[0]: (RunStatus(row[1]), row[2], row[3])
        for row in conn.execute("SELECT run_id, status, revision, finished_at FROM runs")
    }


def diagnose(conn: sqlite3.Connection, now: int | None = None) -> list[Problem]:
    """List every contradiction in the state database. Reads only.

    ``now`` (store clock milliseconds) enables the checks that depend on time: a running
    run whose held claim has expired.
    """
    problems: list[Problem] = []
    add = problems.append
    runs = _runs(conn)
    queue = dict(conn.execute("SELECT run_id, status FROM run_queue").fetchall())
    leases = {
        row[0]: row[1] for row in conn.execute("SELECT run_id, status FROM leases").fetchall()
    }
    if now is not None:
        for (run_id,) in conn.execute(
            "SELECT r.run_id FROM runs r JOIN leases l USING (run_id) WHERE r.status = 'running'"
            " AND l.status = 'held' AND l.expires_at <= ?",
            (now,),
        ):
            add(
                Problem(
                    "expiredClaimOnRunningRun",
                    run_id,
                    "run is running under a claim that has expired; recovery makes it claimable",
                    True,
                )
            )
    for run_id, (status, _revision, finished_at) in runs.items():
        expected_queue = QUEUE_STATUS_OF[status].value
        if queue.get(run_id) != expected_queue:
            add(
                Problem(
                    "queueMismatch",
                    run_id,
                    f"run is {status} but its queue row is {queue.get(run_id, 'missing')}"
                    f" (expected {expected_queue})",
                    True,
                )
            )
        lease = leases.get(run_id)
        if lease == "held" and status is not RunStatus.RUNNING:
            add(Problem("claimOnInactiveRun", run_id, f"a claim is held on a {status} run", True))
        if status is RunStatus.RUNNING and lease != "held":
            add(
                Problem(
                    "runningWithoutClaim",
                    run_id,
                    "run is running but no claim is held; recovery makes it claimable",
                    True,
                )
            )
        if (status in TERMINAL_STATUSES) != (finished_at is not None):
            add(
                Problem(
                    "finishTimeMismatch",
                    run_id,
                    f"run is {status} but finished_at is {'set' if finished_at else 'empty'}",
                    False,
                )
            )
        if stored_view(conn, run_id) != expected_view(conn, run_id):
            add(Problem("viewerStale", run_id, "viewer row disagrees with the run rows", True))
    if now is not None:
        _check_delivery(conn, now, add)
    _check_events(conn, runs, add)
    _check_attempts(conn, runs, add)
    _check_settings(conn, add)
    _check_follow_ups(conn, add)
    _check_interactions(conn, runs, add)
    _check_effects(conn, runs, add)
    _check_schedules(conn, add)
    diagnose_tree.check_tree(conn, add, Problem)
    for (orphan,) in conn.execute(
        "SELECT run_id FROM run_queue WHERE run_id NOT IN (SELECT run_id FROM runs)"
    ):
        add(Problem("queueWithoutRun", orphan, "queue row has no run", False))
    return problems


STALL_REPORT_MS = 120_000
"""How long a step may be stalled (``delivery``) before ``diagnose`` names it: the repairs of
the delivery rule act within seconds, so a longer stall is a fault."""


def _check_delivery(conn: sqlite3.Connection, now: int, add: Any) -> None:
    """Open model steps of waiting runs that no live turn works on and no presentation is
    due for, for longer than ``STALL_REPORT_MS`` (the rule of ``store/delivery.py``)."""
    for request_id, run_id, node_id in conn.execute(
        "SELECT q.request_id, q.run_id, q.node_id FROM interactive_requests q JOIN runs r"
        " USING (run_id) WHERE q.status = 'pending' AND q.for_person = 0"
        " AND r.status = 'waiting'"
    ).fetchall():
        found = delivery.of_request(conn, request_id)
        if found is None or found.state != "stalled" or now - found.since < STALL_REPORT_MS:
            continue
        add(
            Problem(
                "stepStalled",
                run_id,
                f"step {node_id} ({request_id}) has had no live model turn and no presentation"
                f" due for {(now - found.since) // 1000} s ({found.detail}); pause and resume"
                " the run to present it again",
                False,
            )
        )


def _check_events(conn: sqlite3.Connection, runs: dict[str, Any], add: Any) -> None:
    latest = {
        row[0]: (row[1], row[2], row[3])
        for row in conn.execute(
            "SELECT e.run_id, e.revision, e.type, e.run_status FROM events e"
            " JOIN (SELECT run_id, MAX(revision) AS revision FROM events GROUP BY run_id) m"
            " ON e.run_id = m.run_id AND e.revision = m.revision"
        )
    }
    for run_id, (status, revision, _) in runs.items():
        event = latest.get(run_id)
        if event is None or event[0] != revision:
            add(
                Problem(
                    "revisionWithoutEvent",
                    run_id,
                    f"run is at revision {revision} but its newest event is at "
                    f"{event[0] if event else 'none'}",
                    False,
                )
            )
        elif event[2] != status.value:
            add(
                Problem(
                    "eventContradictsRun",
                    run_id,
                    f"the {event[1]} event at revision {event[0]} says {event[2]} while the run "
                    f"is {status}; cancel or resume the run explicitly",
                    False,
                )
            )


def _check_attempts(conn: sqlite3.Connection, runs: dict[str, Any], add: Any) -> None:
    unfinished: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for run_id, attempt_id, status in conn.execute(
        "SELECT run_id, attempt_id, status FROM node_attempts"
        " WHERE status IN ('running', 'waiting')"
    ):
        unfinished[run_id].append((attempt_id, status))
    for run_id, open_attempts in unfinished.items():
        status = runs[run_id][0] if run_id in runs else None
        if len(open_attempts) > 1:
            add(Problem("twoUnfinishedAttempts", run_id, "more than one unfinished attempt", False))
        for attempt_id, attempt_status in open_attempts:
            if status in TERMINAL_STATUSES or (
                attempt_status == "running" and status is not RunStatus.RUNNING
            ):
                add(
                    Problem(
                        "attemptOpenOnInactiveRun",
                        run_id,
                        f"attempt {attempt_id} is {attempt_status} while the run is {status}",
                        True,
                    )
                )


def _check_settings(conn: sqlite3.Connection, add: Any) -> None:
    """A run's live settings and their history agree (``store/settings.py``): the document
    is the one its change number's row holds, and no attempt names a later change."""
    for (run_id,) in conn.execute(
        "SELECT r.run_id FROM runs r LEFT JOIN run_settings s"
        " ON s.run_id = r.run_id AND s.change_no = r.settings_change"
        " WHERE (s.run_id IS NULL AND (r.settings_json IS NOT NULL OR r.settings_change > 0))"
        " OR (s.run_id IS NOT NULL AND s.settings_json IS NOT r.settings_json)"
        " UNION SELECT a.run_id FROM node_attempts a JOIN runs r ON r.run_id = a.run_id"
        " WHERE a.settings_change > r.settings_change"
    ):
        add(
            Problem(
                "settingsOutOfStep",
                run_id,
                "the run's settings disagree with their recorded changes",
                False,
            )
        )


def _check_follow_ups(conn: sqlite3.Connection, add: Any) -> None:
    """A follow-up agrees with its run and its message (``store/follow_ups.py``): none waits
    on a run that ended other than completed, a ready one's message is pending and a sent
    one's sent, and none of an ended, completed run stays queued once its result was sent."""
    for run_id, follow_up_id in conn.execute(
        "SELECT f.run_id, f.follow_up_id FROM run_follow_ups f JOIN runs r USING (run_id)"
        " LEFT JOIN workflow_messages m ON m.message_id = f.message_id"
        " WHERE (f.status = 'queued' AND r.status IN ('failed', 'timed_out', 'cancelled'))"
        " OR (f.status = 'ready' AND m.status != 'pending')"
        " OR (f.status = 'sent' AND m.status != 'sent')"
        " OR (f.status = 'queued' AND r.status = 'completed' AND EXISTS (SELECT 1 FROM"
        " workflow_messages t WHERE t.run_id = r.run_id AND t.kind = 'terminal'"
        " AND t.source_key = 'terminal:' || r.round AND t.status = 'sent'))"
    ):
        add(
            Problem(
                "followUpOutOfStep",
                run_id,
                f"follow-up {follow_up_id} disagrees with its run or its message",
                False,
            )
        )


def _check_interactions(conn: sqlite3.Connection, runs: dict[str, Any], add: Any) -> None:
    open_requests = {
        row[0]: (row[1], row[2])
        for row in conn.execute(
            "SELECT run_id, request_id, status FROM interactive_requests"
            " WHERE status IN ('pending', 'validating')"
        )
    }
    pending_waits = {
        row[0]: row[1]
        for row in conn.execute("SELECT run_id, wait_id FROM run_waits WHERE status = 'pending'")
    }
    for run_id, (status, _, _) in runs.items():
        request = open_requests.get(run_id)
        wait = pending_waits.get(run_id)
        if status is RunStatus.WAITING and request is None and wait is None:
            add(
                Problem(
                    "waitingWithoutRequest",
                    run_id,
                    "run waits on no open request and no pending wait",
                    False,
                )
            )
        if request is not None and wait is not None:
            add(
                Problem(
                    "requestAndWaitOpen",
                    run_id,
                    f"request {request[0]} and wait {wait} are both open",
                    False,
                )
            )
        if wait is not None and status not in (RunStatus.WAITING, RunStatus.PAUSED):
            add(
                Problem(
                    "waitPendingOnActiveRun",
                    run_id,
                    f"wait {wait} is pending while the run is {status}",
                    status in TERMINAL_STATUSES,
                )
            )
        if request is not None and status in TERMINAL_STATUSES:
            add(
                Problem(
                    "requestOpenOnFinishedRun",
                    run_id,
                    f"request {request[0]} is {request[1]} while the run is {status}",
                    True,
                )
            )
        elif (
            request is not None
            and request[1] == "pending"
            and status not in (RunStatus.WAITING, RunStatus.PAUSED)
        ):
            add(
                Problem(
                    "requestPendingOnActiveRun",
                    run_id,
                    f"request {request[0]} is pending while the run is {status}",
                    False,
                )
            )
    for run_id, request_id, request_status, validating, run_status in conn.execute(
        "SELECT q.run_id, q.request_id, q.status, COUNT(s.submission_id), r.status"
        " FROM interactive_requests q JOIN runs r USING (run_id) LEFT JOIN"
        " interactive_submissions s ON s.request_id = q.request_id AND s.status = 'validating'"
        " GROUP BY q.request_id"
    ):
        if (request_status == "validating") != (validating == 1):
            add(
                Problem(
                    "submissionMismatch",
                    run_id,
                    f"request {request_id} is {request_status} with {validating} submission(s)"
                    " being validated",
                    False,
                )
            )
        elif request_status == "validating" and run_status == "waiting":
            add(
                Problem(
                    "validationStranded",
                    run_id,
                    f"request {request_id} waits for a validation no runner will do (the run"
                    " waits); cancel or pause and resume the run",
                    False,
                )
            )
    for run_id, message_id, request_status in conn.execute(
        "SELECT m.run_id, m.message_id, q.status FROM workflow_messages m"
        " JOIN interactive_requests q USING (request_id) WHERE m.status = 'pending'"
        " AND q.status NOT IN ('pending', 'validating')"
    ):
        add(
            Problem(
                "messageOfClosedRequest",
                run_id,
                f"message {message_id} would still present request that is {request_status}",
                False,
            )
        )
    for decision_id, run_id, status, resolved in conn.execute(
        "SELECT d.decision_id, d.run_id, d.status, r.decision_id IS NOT NULL"
        " FROM human_decisions d LEFT JOIN human_decision_resolutions r USING (decision_id)"
    ):
        if (status == "resolved") != bool(resolved):
            add(
                Problem(
                    "decisionResolutionMismatch",
                    run_id,
                    f"decision {decision_id} is {status} but has "
                    f"{'a' if resolved else 'no'} resolution row",
                    False,
                )
            )


def _check_effects(conn: sqlite3.Connection, runs: dict[str, Any], add: Any) -> None:
    for run_id, effect_id, status in conn.execute(
        "SELECT run_id, effect_id, status FROM effects WHERE status IN ('pending', 'applying')"
    ):
        run_status = runs[run_id][0] if run_id in runs else None
        if run_status in TERMINAL_STATUSES:
            add(
                Problem(
                    "effectOpenOnFinishedRun",
                    run_id,
                    f"effect {effect_id} is {status} while the run is {run_status}",
                    True,
                )
            )
        elif status == "applying" and run_status is not RunStatus.RUNNING:
            add(
                Problem(
                    "effectApplyingWithoutRunner",
                    run_id,
                    f"effect {effect_id} is applying while the run is {run_status}; "
                    "resolve it with 'pi-workflows effect resolve'",
                    False,
                )
            )
    for run_id, effect_id, status, outcome in conn.execute(
        "SELECT e.run_id, e.effect_id, e.status, a.status FROM effects e JOIN effect_attempts a"
        " ON a.effect_id = e.effect_id AND a.attempt_no = e.attempt_count"
        " WHERE e.status IN ('pending', 'cancelled') AND a.status IN ('applied', 'rejected')"
    ):
        add(
            Problem(
                "effectOutcomeLost",
                run_id,
                f"effect {effect_id} is {status} although its last execution {outcome}: the"
                " outcome its receipt holds is no longer the effect's",
                False,
            )
        )
    for run_id, effect_id in conn.execute(
        "SELECT e.run_id, e.effect_id FROM effects e JOIN runs r USING (run_id)"
        " WHERE e.status = 'ambiguous' AND r.status IN ('queued', 'running', 'waiting')"
    ):
        add(
            Problem(
                "ambiguousEffectOnUnparkedRun",
                run_id,
                f"effect {effect_id} is ambiguous while its run continues; pause the run and "
                "resolve the effect with 'pi-workflows effect resolve'",
                False,
            )
        )
    for run_id, runner_epoch, pid in conn.execute(
        "SELECT r.run_id, p.runner_epoch, p.pid FROM runner_processes p"
        " JOIN run_runners r USING (runner_epoch) WHERE p.status = 'live' AND r.status = 'exited'"
    ):
        add(
            Problem(
                "processLiveAfterRunnerExit",
                run_id,
                f"process group {pid} of runner {runner_epoch} is recorded live after its runner"
                " exited; the next server start stops it if it is still ours",
                False,
            )
        )


def _check_schedules(conn: sqlite3.Connection, add: Any) -> None:
    """Schedules and their fires (``store/schedules.py``): each started fire's run exists
    (or was pruned) and carries the schedule and fire time; every recorded fire time is
    before the schedule's next one (else it would fire again; a trigger's time is no
    cadence time, so it may be later); no queued fire outlives its
    schedule. Not a run's problem: reported with the run involved, if any."""
    for schedule_id, fire_at, run_id, carried, at, pruned in conn.execute(
        "SELECT f.schedule_id, f.fire_at, f.run_id, r.schedule_id, r.schedule_fire_at,"
        " p.run_id IS NOT NULL FROM schedule_fires f LEFT JOIN runs r ON r.run_id = f.run_id"
        " LEFT JOIN pruned_runs p ON p.run_id = f.run_id WHERE f.outcome = 'started'"
    ):
        if carried is None and not pruned:
            add(
                Problem(
                    "fireWithoutRun",
                    run_id,
                    f"schedule {schedule_id} recorded its fire at {fire_at} started as run"
                    f" {run_id}, which does not exist and was not pruned",
                    False,
                )
            )
        elif carried is not None and (carried, at) != (schedule_id, fire_at):
            add(
                Problem(
                    "fireRunMismatch",
                    run_id,
                    f"schedule {schedule_id} recorded its fire at {fire_at} started as run"
                    f" {run_id}, which carries schedule {carried} at {at}",
                    False,
                )
            )
    for schedule_id, next_fire, latest in conn.execute(
        "SELECT s.schedule_id, s.next_fire_at, (SELECT MAX(MAX(f.fire_at),"
        " COALESCE(MAX(f.missed_until), 0)) FROM schedule_fires f"
        " WHERE f.schedule_id = s.schedule_id AND f.source != 'trigger')"  # not cadence times
        " FROM schedules s WHERE s.status = 'active'"
    ):
        if latest is not None and latest >= next_fire:
            add(
                Problem(
                    "fireAfterNextFire",
                    None,
                    f"schedule {schedule_id} has a fire recorded at {latest}, not before its"
                    f" next fire time {next_fire}: that time would fire again",
                    False,
                )
            )
    for schedule_id, fire_at in conn.execute(
        "SELECT f.schedule_id, f.fire_at FROM schedule_fires f JOIN schedules s"
        " USING (schedule_id) WHERE f.outcome = 'queued' AND s.status = 'deleted'"
    ):
        add(
            Problem(
                "queuedFireOfDeletedSchedule",
                None,
                f"schedule {schedule_id} is deleted but its fire at {fire_at} is still queued",
                False,
            )
        )


def repair(db: Database) -> RepairReport:
    """Fix every repairable problem of runs that have no unrepairable one; report the rest."""
    report = RepairReport()
    with db.read() as conn:
        problems = diagnose(conn, db.clock.now_ms())
    by_run: dict[str | None, list[Problem]] = defaultdict(list)
    for problem in problems:
        by_run[problem.run_id].append(problem)
    for run_id, run_problems in by_run.items():
        if run_id is None or not all(p.repairable for p in run_problems):
            report.remaining.extend(run_problems)
            continue
        _repair_run(db, run_id, run_problems)
        report.fixed.extend(run_problems)
    return report


def _repair_run(db: Database, run_id: str, run_problems: list[Problem]) -> None:
    codes = {problem.code for problem in run_problems}
    if codes == {"viewerStale"}:
        with db.atomic("repair.project") as tx:
            project_run(tx.conn, run_id)
        return
    if codes & {"runningWithoutClaim", "expiredClaimOnRunningRun"}:
        recover(db, run_id)
        return

    def apply(tx: Transaction, run: RunRow) -> None:
        queue_status = QUEUE_STATUS_OF[run.status].value
        tx.conn.execute(
            "UPDATE run_queue SET status = ?, updated_at = ? WHERE run_id = ?",
            (queue_status, tx.now, run_id),
        )
        if run.status is not RunStatus.RUNNING:
            tx.conn.execute(
                "UPDATE leases SET status = 'released', released_at = ?"
                " WHERE run_id = ? AND status = 'held'",
                (tx.now, run_id),
            )
        terminal = run.status in TERMINAL_STATUSES
        closable = ("running", "waiting") if terminal else ("running",)
        if run.status is not RunStatus.RUNNING:
            tx.conn.execute(
                "UPDATE node_attempts SET status = 'interrupted', finished_at = ?,"
                f" finished_revision = {attempts.SETTLING_REVISION}"
                f" WHERE run_id = ? AND status IN ({', '.join('?' for _ in closable)})",
                (tx.now, run_id, *closable),
            )
        if terminal:
            interactions.cancel_open(tx, run_id)
            waits.cancel_open(tx, run_id)
            effects.settle_on_exit(tx, run_id, terminal=True)

    write_run(
        db,
        run_id,
        name="repair.run",
        event_type="state.repaired",
        event_data={"problems": sorted(codes)},
        claim=None,
        apply=apply,
    )
