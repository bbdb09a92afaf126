"""What every bench section shares: sizes, the process registry, peers, output and budget.

Runs in the bench process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.baseline import Baseline
from bench.peers import PeerEnv
from bench.processes import Processes


@dataclass(frozen=True)
class Sizes:
    """How much each section measures. ``FULL`` fits in about 10 minutes on 2 cores."""

    warmup: int = 1
    """Unrecorded repetitions before the measured ones (nodes, start, recovery)."""
    rounds: int = 7
    """Measured rounds of the node-overhead section."""
    chain_sizes: tuple[int, ...] = (10, 100)
    floor_commits: int = 100
    """Durable commits per round for the commit floor."""
    floor_round_trips: int = 300
    """IPC round trips per round for the IPC floor."""
    start_reps: int = 9
    recovery_reps: int = 5
    recovery_nodes: int = 20
    recovery_gate: int = 10
    """0-based index of the node that blocks (so ``recovery_gate`` nodes committed before)."""
    parked_target: int = 10_000
    parked_fill_seconds: float = 120.0
    """Time allowed to start runs and get them parked (the issue's "under 2 minutes"); the
    count reached is what is reported, with its rate."""
    parked_answer_seconds: float = 100.0
    """Time allowed to complete the parked runs after answering them."""
    parked_clients: int = 4
    """Client threads that start (and answer) runs, in the parked and throughput sections."""
    timers_reps: int = 15
    """Measured rounds of the timers section's latency part (retry, signal, answer)."""
    timers_sleeping: int = 10_000
    """Runs put to sleep far into the future at once (the timers section)."""
    timers_fill_seconds: float = 120.0
    """Time allowed to start the sleeping runs and get them asleep."""
    timers_due: int = 1_000
    """Timers that come due within ``timers_due_window_seconds``, beside the sleeping runs."""
    timers_due_window_seconds: float = 1.0
    timers_lead_seconds: float = 3.0
    """Added to twice the expected start time of the due timers before the first is due."""
    timers_idle_seconds: float = 3.0
    """How long the server's CPU time is sampled while every run sleeps."""
    wakeups_count: int = 10_000
    """Runs that come due within ``wakeups_window_seconds`` (mass wake-ups, timers section)."""
    wakeups_window_seconds: float = 10.0
    children_count: int = 100
    """Children of the ``fan_out`` the children section compares with client starts."""
    children_reps: int = 5
    children_join: int = 1_000
    """Children of the wide join whose parent the children section counts."""
    throughput_runs: int = 500
    throughput_nodes: int = 10
    throughput_capacities: tuple[int, ...] = (4, 16)
    """``PI_WORKFLOWS_MAX_RUNNERS`` values (and DBOS queue concurrencies) measured."""
    throughput_reps: int = 1
    profile_runs: int = 3
    pi_reps: int = 3
    """Repetitions of the Pi bridge section (each a new Pi process, two runs)."""
    ui_runs: int = 10_000
    """Runs parked behind the web page's run list (the ui section)."""
    ui_reps: int = 9
    """Timed page loads per measure of the ui section."""
    ui_latency_reps: int = 10
    """Pauses (and as many resumes) whose way to the browser the ui section times."""


FULL = Sizes()
QUICK = Sizes(
    warmup=0,
    rounds=2,
    floor_commits=20,
    floor_round_trips=50,
    start_reps=1,
    recovery_reps=1,
    parked_target=10,
    parked_fill_seconds=40.0,
    parked_answer_seconds=40.0,
    timers_reps=1,
    timers_sleeping=10,
    timers_fill_seconds=40.0,
    timers_due=20,
    timers_lead_seconds=0.5,
    timers_idle_seconds=0.5,
    wakeups_count=20,
    wakeups_window_seconds=0.5,
    children_count=4,
    children_reps=1,
    children_join=10,
    throughput_runs=12,
    throughput_nodes=3,
    profile_runs=1,
    pi_reps=1,
    ui_runs=20,
    ui_reps=2,
    ui_latency_reps=2,
)


@dataclass
class Context:
    """One bench invocation."""

    sizes: Sizes
    procs: Processes
    out: Path
    """Where results are written."""
    tmp: Path
    """This invocation's private temp directory (state dirs, databases, logs)."""
    peers: PeerEnv
    run_peers: bool
    started: float = field(default_factory=time.monotonic)
    errors: list[str] = field(default_factory=list)
    chart_note: str | None = None
    """Why there is no chart, when there is none."""
    baseline: Baseline | None = None
    """The recorded baseline commit measured beside this checkout (``bench/baseline.py``)."""

    def say(self, message: str) -> None:
        """One progress line on stdout, with the elapsed time."""
        print(f"[{time.monotonic() - self.started:6.1f}s] {message}", flush=True)

    def peer(self, name: str) -> bool:
        """Whether peer ``name`` is to be measured in this invocation."""
        return self.run_peers and self.peers.has(name)

    def peer_status(self, name: str) -> str:
        """``ok`` or why the peer was not measured."""
        if not self.run_peers:
            return "not run (--no-peers or --only ours)"
        if self.peers.has(name):
            return "ok"
        return self.peers.missing.get(name, "unavailable")

    def section_dir(self, name: str) -> Path:
        """A fresh directory for one section's files."""
        path = self.tmp / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def fail(self, section: str, exc: BaseException) -> dict[str, Any]:
        """Record a section's failure; the bench goes on with the next section."""
        message = f"{section}: {type(exc).__name__}: {exc}"
        self.errors.append(message)
        self.say(f"ERROR {message}")
        return {"error": message}
