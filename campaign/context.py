"""What one seed knows while it runs: its directories, surfaces, the runs it started, what it
saw of them, and the violations found so far.

Runs in the campaign driver. Observation (`observe.py`), the operator (`operator.py`), the
faults (`faults.py`) and the oracle (`oracle.py`) all read and update one `SeedContext`; the
driver (`seed.py`) owns its life.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from campaign.leaks import LeakScanner
from campaign.plan import Plan, PlannedRun
from campaign.processes import Processes
from campaign.sessions import SessionClients
from campaign.surfaces import Surfaces
from campaign.witness import Witnesses

if TYPE_CHECKING:
    from campaign.telegram import TelegramSeat

TERMINAL = frozenset({"completed", "failed", "timed_out", "cancelled"})


@dataclass
class Resolution:
    """One `effect resolve` the operator sent, with the evidence it decided on."""

    effect_id: str
    key: str
    decision: str  # "applied", "rejected" or "retry"
    applied_at_decision: dict[str, bool]  # body nonce -> had it applied when we looked
    accepted: bool = False


@dataclass
class RunTrack:
    """One planned run and everything the campaign saw of it."""

    planned: PlannedRun
    run_id: str | None = None
    start_answers: list[str] = field(default_factory=list)  # run ids each `run start` returned
    view: dict[str, Any] | None = None
    fingerprint: tuple[Any, ...] = ()
    changed_at: float = field(default_factory=time.monotonic)
    answered: dict[str, str] = field(default_factory=dict)  # request id -> "ok" | "refused"
    decision: str | None = None  # the choice the server accepted from us
    decision_refused: bool = False
    submitted_valid: bool = False  # the server accepted our valid agent-step submission
    valid_sent: bool = False  # a headless agent sent a valid one (it may not hear the answer)
    wrong_sent: set[str] = field(default_factory=set)  # requests we first answered wrongly
    waiting_since: dict[str, float] = field(default_factory=dict)
    resolutions: list[Resolution] = field(default_factory=list)
    resumes: int = 0
    child_resumes: dict[str, int] = field(default_factory=dict)  # run below -> our resumes
    commands: int = 0  # logical commands sent for this run (names their keys)
    resume_at: float | None = None  # a run we paused: when to resume it
    cancel_sent: bool = False
    effects_checked_after_end: bool = False
    stuck: bool = False
    parks: list[str] = field(default_factory=list)
    excused_keys: set[str] = field(default_factory=set)
    # Events the operator sent to a `timer` run's wait_event node.
    event_sends: int = 0
    event_wrong_sent: bool = False
    event_valid_sent: bool = False  # the server accepted (or adopted) the valid event
    event_done: bool = False  # no more events to send (accepted, or the run moved on)
    event_signal_id: str | None = None
    early_decided: bool = False
    # Lineage (campaign/lineage.py): a fork that could not be made; a `mend` run's code
    # change, its upgrade, and the upgrades sent.
    skipped: bool = False
    fork_edits: dict[str, Any] | None = None  # the outputs its `run fork --set` replaced
    edited: bool = False
    upgraded: bool = False
    upgrade_tries: int = 0
    retried_completed: bool = False  # a retry (campaign/retrying.py): its refusal was tried
    # The delivery rule (store/delivery.py): since when (monotonic) the run's open step has
    # been seen `stalled` (no live turn, nothing due), and for which request.
    stalled_since: float | None = None
    stalled_request: str | None = None

    @property
    def status(self) -> str | None:
        """The user-facing status of the last view."""
        return None if self.view is None else str(self.view.get("status"))

    @property
    def gave_up_below(self) -> bool:
        """The operator gave up resuming a run below this one (it stays parked, and this
        run waits for it)."""
        return any(count >= 6 for count in self.child_resumes.values())

    @property
    def settled(self) -> bool:
        """Terminal (or given up on by the stuck detector, or a fork that was skipped)."""
        return self.stuck or self.skipped or self.status in TERMINAL


@dataclass
class ScheduleTrack:
    """The seed's schedule and what the operator did with it."""

    added: bool = False
    deleted: bool = False
    schedule_id: str | None = None
    added_at_ms: int | None = None  # wall clock when the add was answered
    deleted_at_ms: int | None = None  # wall clock when the delete was sent
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)  # run id -> its summary
    refresh_at: float = 0.0  # when the operator lists its runs again (monotonic)
    listed_after_delete: bool = False  # its runs were listed once it could start no more
    resumes: dict[str, int] = field(default_factory=dict)  # run id -> parks it resumed

    @property
    def quiet(self) -> bool:
        """Never added; or deleted, listed since, and every run it started has ended."""
        if not self.added:
            return True
        return (
            self.deleted
            and self.listed_after_delete
            and all(r.get("status") in TERMINAL for r in self.runs.values())
        )


@dataclass
class Violation:
    """One broken promise, with what is needed to reproduce it."""

    seed: int
    kind: str
    message: str
    run_id: str | None = None
    dump: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The report entry."""
        return {
            "seed": self.seed,
            "kind": self.kind,
            "message": self.message,
            "runId": self.run_id,
            "dump": self.dump,
            "rerun": f"make campaign SEEDS=1 SEED_START={self.seed}",
        }


@dataclass
class SeedContext:
    """The state of one seed in progress."""

    seed: int
    root: Path
    home: Path
    project: Path
    witness_dir: Path
    plan: Plan
    lease_seconds: float
    surfaces: Surfaces
    processes: Processes
    witnesses: Witnesses
    leaks: LeakScanner
    began: float = field(default_factory=time.monotonic)
    tracks: list[RunTrack] = field(default_factory=list)
    schedule: ScheduleTrack = field(default_factory=ScheduleTrack)
    durable_counts: dict[str, int] = field(default_factory=dict)  # for the report
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    faults_done: list[dict[str, Any]] = field(default_factory=list)
    token_hashes: set[str] = field(default_factory=set)
    server_pid: int | None = None
    server_epoch: int | None = None
    server_up: bool = False
    servers_seen: int = 0
    runner_pids: dict[int, str] = field(default_factory=dict)  # live runner pid -> run id
    pending_cont: list[tuple[float, int]] = field(default_factory=list)  # (when, pid)
    killed_shells: set[str] = field(default_factory=set)  # nonces of bodies we SIGKILLed
    last_hash_sample: float = 0.0
    sessions: SessionClients | None = None  # the origin sessions' scripted clients
    pi_wrapper: Path | None = None  # `bin/pi`: the headless agent the servers start
    attributed: dict[str, int] = field(default_factory=dict)  # "fact <- cause" -> count
    telegram: TelegramSeat | None = None  # the seed's Telegram seat, if its plan has one
    telegram_counts: dict[str, int] = field(default_factory=dict)  # for the report

    def elapsed(self) -> float:
        """Seconds since the seed began."""
        return time.monotonic() - self.began

    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        """Record a violation (once per kind, run and message)."""
        for old in self.violations:
            if (old.kind, old.run_id, old.message) == (kind, run_id, message):
                return old
        found = Violation(self.seed, kind, message, run_id)
        self.violations.append(found)
        self.note(f"VIOLATION {kind}: {message}")
        return found

    def note(self, text: str) -> None:
        """A line of the seed's own log (kept with a failing seed)."""
        self.notes.append(f"{self.elapsed():7.2f} {text}")

    def track_of(self, run_id: str) -> RunTrack | None:
        """The track of a run id."""
        for track in self.tracks:
            if track.run_id == run_id:
                return track
        return None


def source_has_ended(ctx: SeedContext, track: RunTrack, source: RunTrack, what: str) -> bool:
    """True once the run `track` derives from (a fork's or a retry's `source`) has ended and
    its effects were checked after its end; a source that never ended (stuck, or skipped
    without a run) marks `track` skipped, noted as `what`."""
    if source.stuck or (source.run_id is None and source.skipped):
        track.skipped = True
        ctx.note(f"{what} #{track.planned.index} skipped: its source never ended")
        return False
    return (
        source.run_id is not None and source.status in TERMINAL and source.effects_checked_after_end
    )
