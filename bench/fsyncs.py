"""How many durable commits, and how many fsync calls, one node costs.

Runs in the bench process. Two independent counts, each over the same workflows the node
section times (a 1-node run and an N-node chain), on a server of its own (never the timed
one), so the per-node figure is the marginal ``(count(N) - count(1)) / (N - 1)``:

- **Commits, from the WAL itself** (needs nothing but Python): with ``journal_mode=WAL``
  every committed transaction appends frames to the ``-wal`` file, the last of them
  carrying a commit marker (its "database size after commit" field is non-zero), and with
  ``synchronous=FULL`` SQLite fsyncs the WAL at every such commit. ``read_wal`` parses the
  file (header, salts, the cumulative checksums) and counts the valid commit frames; the
  difference between two reads is the commits in between. SQLite restarts the WAL from its
  first frame after a complete checkpoint, which would lose the count, so during the
  window the bench holds a read transaction of its own on the database (a reader keeps
  the writer from restarting the log), and if the header's salts still changed (the
  reader began when the log was fully checkpointed), the window is measured again.
- **fdatasync/fsync system calls, with strace** when ``strace`` is installed and may trace
  the bench's own children (no root needed; it is not part of a fresh machine, so this
  count is optional): the server is started as ``strace -f -e trace=fdatasync,fsync``
  (``--seccomp-bpf`` when supported, so only those calls stop) and every call is logged
  with its wall-clock time and pid; calls inside a run's window are counted, split into
  the server's own and its children's (a runner holds no database: those must be 0).
  This pass runs without the pinned reader, so checkpoints' own syncs are included.

The peers (in-process DBOS and LangGraph workers) are counted with strace the same way when
both strace and the peer are available.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.context import Context
from bench.ourserver import BenchError, OurServer
from bench.peers import PeerWorker
from bench.workflows import write_chain

WAL_MAGIC = (0x377F0682, 0x377F0683)
"""The WAL header's magic: checksums over little-endian words, or big-endian ones."""
WAL_HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24
SETTLE_SECONDS = 0.3
"""Idle time inside each window after the run completed (the runner's exit is recorded)."""
ATTEMPTS = 3
"""Tries of one WAL window whose log was restarted anyway."""
_TRACE_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(fdatasync|fsync)\(")


@dataclass(frozen=True)
class WalMark:
    """What the ``-wal`` file held at one moment."""

    salts: tuple[int, int] | None
    """The header's salts: a new pair each time SQLite restarts the log (None: no log)."""
    commits: int
    """Valid frames with a commit marker, from the first frame."""
    frames: int
    """Valid frames up to and including the last commit frame."""


def _checksum(data: bytes, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes), continuing from (s0, s1)."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def read_wal(path: Path) -> WalMark:
    """Parse ``path`` (a database's ``-wal`` file) and count its valid commit frames.

    A frame is valid while its salts match the header's and the cumulative checksum (over
    each frame's first 8 header bytes and its page) matches the one it carries; the first
    invalid frame ends the log, as in SQLite's own recovery.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return WalMark(None, 0, 0)
    if len(data) < WAL_HEADER_BYTES:
        return WalMark(None, 0, 0)
    magic, _, page_size, _, salt1, salt2, ck1, ck2 = struct.unpack(">8I", data[:32])
    if magic not in WAL_MAGIC:
        raise BenchError(f"{path.name} is not a WAL file (magic {magic:#x})")
    big = bool(magic & 1)
    if _checksum(data[:24], 0, 0, big) != (ck1, ck2):
        return WalMark(None, 0, 0)  # a header being rewritten: no valid frame yet
    s0, s1 = ck1, ck2
    offset, frames, commits, committed_frames = WAL_HEADER_BYTES, 0, 0, 0
    step = FRAME_HEADER_BYTES + page_size
    while offset + step <= len(data):
        _, size_after, f_salt1, f_salt2, f_ck1, f_ck2 = struct.unpack_from(">6I", data, offset)
        if (f_salt1, f_salt2) != (salt1, salt2):
            break
        s0, s1 = _checksum(data[offset : offset + 8], s0, s1, big)
        s0, s1 = _checksum(data[offset + FRAME_HEADER_BYTES : offset + step], s0, s1, big)
        if (s0, s1) != (f_ck1, f_ck2):
            break
        frames += 1
        if size_after:
            commits += 1
            committed_frames = frames
        offset += step
    return WalMark((salt1, salt2), commits, committed_frames)


@contextlib.contextmanager
def pinned_reader(database: Path) -> Any:
    """A read transaction on ``database`` held for the block (keeps the WAL from restarting)."""
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        yield
    finally:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("COMMIT")
        conn.close()


def strace_command(log: Path) -> tuple[list[str] | None, str]:
    """The prefix that runs a command under strace logging its fsync calls to ``log``, and
    a note; (None, why) when strace is missing or may not trace here."""
    strace = shutil.which("strace")
    if strace is None:
        return None, "strace is not installed: fsync system calls not counted"
    base = [strace, "-f", "-qq", "-ttt", "-e", "signal=none", "-e", "trace=fdatasync,fsync"]
    last = ""
    for extra in (["--seccomp-bpf"], []):
        done = subprocess.run(
            [*base, *extra, "-o", "/dev/null", sys.executable, "-c", "pass"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode == 0:
            how = "strace -f -e trace=fdatasync,fsync" + (" --seccomp-bpf" if extra else "")
            return [*base, *extra, "-o", str(log)], how
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
    return None, f"strace cannot trace here ({last[:160]}): fsync system calls not counted"


def trace_counts(
    log: Path, windows: dict[str, tuple[float, float]], server_pid: int | None
) -> dict[str, dict[str, int]]:
    """fsync-family calls in each wall-clock window: ``{label: {server, children, total}}``
    (``server`` is every call when ``server_pid`` is None)."""
    counts = {label: {"server": 0, "children": 0, "total": 0} for label in windows}
    for line in log.read_text(errors="replace").splitlines():
        match = _TRACE_LINE.match(line)
        if match is None:
            continue
        pid, at = int(match.group(1)), float(match.group(2))
        for label, (begin, end) in windows.items():
            if begin <= at <= end:
                who = "server" if server_pid is None or pid == server_pid else "children"
                counts[label][who] += 1
                counts[label]["total"] += 1
    return counts


def _our_run(server: OurServer, workflow: Path) -> tuple[float, float]:
    """One run to its end plus the settle time: its wall-clock window."""
    begin = time.time()
    server.run_to_end(workflow, {}, poll=0.01)
    time.sleep(SETTLE_SECONDS)
    return begin, time.time()


def _wal_pass(server: OurServer, files: dict[int, Path], database: Path) -> dict[str, Any]:
    """Commits and WAL frames per run, for each size, with a reader pinned."""
    found: dict[str, Any] = {}
    restarts = 0
    for n, workflow in files.items():
        for _ in range(ATTEMPTS):
            with pinned_reader(database):
                before = read_wal(database.with_name(database.name + "-wal"))
                _our_run(server, workflow)
                after = read_wal(database.with_name(database.name + "-wal"))
            if before.salts is not None and before.salts == after.salts:
                found[str(n)] = {
                    "commits": after.commits - before.commits,
                    "walFrames": after.frames - before.frames,
                }
                break
            restarts += 1
        else:
            raise BenchError(f"the WAL was restarted during each of {ATTEMPTS} windows")
    found["walRestartsRetried"] = restarts
    return found


def _per_node(counts: dict[str, Any], key: str, sizes: tuple[int, int]) -> dict[str, float]:
    one, n = sizes
    at_one, at_n = counts[str(one)][key], counts[str(n)][key]
    return {
        "marginalPerNode": round((at_n - at_one) / (n - one), 3),
        "grossPerNode": round(at_n / n, 3),
    }


def _stop_traced(server: OurServer) -> None:
    """Stop the server by its own pid (a SIGTERM to strace would only detach it), then reap
    strace, which ends with its last tracee."""
    with contextlib.suppress(Exception):
        server.client.stop(wait=True, timeout=30)
    server.close_client()
    if server.process is not None:
        try:
            server.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.stop()


def ours(ctx: Context, directory: Path, n: int) -> dict[str, Any]:
    """Both counts for pi-workflows: see the module docstring."""
    sizes = (1, n)
    directory.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"sizes": list(sizes)}
    prefix, how = strace_command(directory / "strace-ours.log")
    result["syscallMethod"] = how
    server = OurServer(ctx.procs, directory / "ours", wrapper=prefix or ()).start()
    files = {size: write_chain(server.project, size) for size in sizes}
    database = server.home / "state.sqlite"
    windows: dict[str, tuple[float, float]] = {}
    server_pid: int | None = None
    try:
        server_pid = int(server.client.status()["pid"])
        server.run_to_end(files[1], {})  # warm-up: the runner template, the description cache
        for size, workflow in files.items():
            windows[str(size)] = _our_run(server, workflow)
        wal = _wal_pass(server, files, database)
    finally:
        if prefix is not None:
            _stop_traced(server)
        else:
            server.stop()
    result["commits"] = {
        "method": "valid WAL commit frames between two reads, a read transaction pinned",
        "perRun": {k: v for k, v in wal.items() if k != "walRestartsRetried"},
        "walRestartsRetried": wal["walRestartsRetried"],
        **_per_node(wal, "commits", sizes),
        "walFramesPerNode": _per_node(wal, "walFrames", sizes)["marginalPerNode"],
    }
    if prefix is not None:
        counts = trace_counts(directory / "strace-ours.log", windows, server_pid)
        result["fsyncs"] = {
            "method": how,
            "perRun": counts,
            **_per_node(counts, "total", sizes),
            "childrenCalls": sum(c["children"] for c in counts.values()),
        }
    return result


def peer(ctx: Context, name: str, directory: Path, n: int) -> dict[str, Any] | None:
    """fsync calls per node of an in-process peer worker under strace (None: not counted)."""
    assert ctx.peers.python is not None
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / f"strace-{name}.log"
    prefix, _ = strace_command(log)
    if prefix is None:
        return None
    worker = PeerWorker(
        ctx.procs,
        ctx.peers.python,
        f"{name}_peer.py",
        ["worker", str(directory / f"{name}-fsync.sqlite")],
        directory / f"{name}-fsync.log",
        wrapper=prefix,
    )
    windows: dict[str, tuple[float, float]] = {}
    try:
        worker.call("chain", n=1)  # warm-up: graph compiled, tables created
        for size in (1, n):
            begin = time.time()
            worker.call("chain", n=size)
            windows[str(size)] = (begin, time.time())
    finally:
        worker.close()
    counts = trace_counts(log, windows, None)
    return {"perRun": counts, **_per_node(counts, "total", (1, n))}
