"""The peers' own virtual environment, and talking to a peer worker process.

Runs in the bench process. Peers (DBOS Transact, LangGraph) and matplotlib live in
``bench/.venv-peers``, created from ``bench/peers-requirements.txt`` with the same base
interpreter as the bench (so the same Python and the same SQLite library), never in the
project's environment. The venv is reused while a stamp (the requirements' bytes and the
interpreter version) matches. If the whole set cannot be installed, each line is tried on
its own, so one broken peer does not stop the others; what is missing is reported, and the
bench goes on without it.

A peer worker is a script in ``bench/peer_scripts/`` run with the venv's python. It reads
one JSON command per line on stdin and answers one JSON object per line on stdout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.processes import Processes

BENCH_DIR = Path(__file__).resolve().parent
PEER_VENV = BENCH_DIR / ".venv-peers"
REQUIREMENTS = BENCH_DIR / "peers-requirements.txt"
SCRIPTS = BENCH_DIR / "peer_scripts"
_STAMP = ".bench-stamp"

# What each peer needs to import, and the distributions whose versions are reported.
PEER_MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "dbos": ("dbos", ("dbos", "sqlalchemy")),
    "langgraph": (
        "langgraph.checkpoint.sqlite",
        ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite"),
    ),
    "matplotlib": ("matplotlib", ("matplotlib",)),
}


@dataclass
class PeerEnv:
    """The peer venv and which peers import in it."""

    python: str | None
    available: dict[str, dict[str, str]] = field(default_factory=dict)
    """peer -> distribution versions, for each peer that imports."""
    missing: dict[str, str] = field(default_factory=dict)
    """peer -> why it is not available."""
    setup_seconds: float = 0.0
    created: bool = False

    def has(self, peer: str) -> bool:
        """Whether ``peer`` can be run."""
        return self.python is not None and peer in self.available


def _stamp() -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def _pins() -> list[str]:
    lines = REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def _create(log: Path, say: Any) -> str | None:
    """Make the venv and install the pins; None, or why there is no venv at all."""
    python = PEER_VENV / "bin" / "python"
    say(f"creating the peer venv {PEER_VENV} (pinned in {REQUIREMENTS.name}) ...")
    shutil.rmtree(PEER_VENV, ignore_errors=True)
    with log.open("ab") as out:
        made = subprocess.run(
            [sys.executable, "-m", "venv", str(PEER_VENV)], stdout=out, stderr=out, check=False
        )
        if made.returncode != 0 or not python.exists():
            return f"could not create the peer venv (see {log})"
        pip = [
            str(python),
            *("-m", "pip", "install", "--disable-pip-version-check", "-q"),
            *("--retries", "1", "--timeout", "20"),
        ]
        whole = subprocess.run([*pip, "-r", str(REQUIREMENTS)], stdout=out, stderr=out, check=False)
        if whole.returncode == 0:
            return None
        # One peer's failure must not stop the others: install each peer's pins alone.
        for peer, (_, dists) in PEER_MODULES.items():
            pins = [p for p in _pins() if _name(p) in dists]
            one = subprocess.run([*pip, *pins], stdout=out, stderr=out, check=False)
            if one.returncode != 0:
                say(f"  could not install {peer} ({' '.join(pins)}; see {log})")
    return None


def _name(pin: str) -> str:
    return pin.split("==", maxsplit=1)[0].strip().lower()


def ensure_peer_env(log: Path, say: Any) -> PeerEnv:
    """Create or reuse the peer venv; never raises (failures are reported in the result).

    The stamp is written only when every peer imports, so a failed install is tried again
    by the next invocation.
    """
    start = time.monotonic()
    python = PEER_VENV / "bin" / "python"
    stamp = PEER_VENV / _STAMP
    created = not (python.exists() and stamp.exists() and stamp.read_text() == _stamp())
    if created:
        failure = _create(log, say)
        if failure is not None:
            return PeerEnv(
                None,
                missing=dict.fromkeys(PEER_MODULES, failure),
                setup_seconds=time.monotonic() - start,
                created=True,
            )
    env = PeerEnv(str(python), created=created)
    for peer, (module, dists) in PEER_MODULES.items():
        versions = _versions(str(python), module, dists)
        if isinstance(versions, str):
            env.missing[peer] = versions
        else:
            env.available[peer] = versions
    if created and not env.missing:
        stamp.write_text(_stamp())
    env.setup_seconds = time.monotonic() - start
    return env


def _versions(python: str, module: str, dists: tuple[str, ...]) -> dict[str, str] | str:
    code = (
        "import importlib, importlib.metadata as m, json, sqlite3, sys\n"
        f"importlib.import_module({module!r})\n"
        f"v = {{d: m.version(d) for d in {list(dists)!r}}}\n"
        "v['python'] = sys.version.split()[0]\n"
        "v['sqlite'] = sqlite3.sqlite_version\n"
        "print(json.dumps(v))\n"
    )
    done = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["import failed"])[-1]
        return f"not installed: {last[:200]}"
    parsed: dict[str, str] = json.loads(done.stdout)
    return parsed


class PeerWorkerError(RuntimeError):
    """A peer worker died, timed out or answered an error."""


class PeerWorker:
    """One long-lived peer process speaking line-JSON on stdin/stdout."""

    def __init__(
        self,
        procs: Processes,
        python: str,
        script: str,
        args: list[str],
        log: Path,
        wrapper: list[str] | None = None,
    ) -> None:
        self.name = script
        self.log = log
        self._process = procs.spawn(
            [*(wrapper or []), python, str(SCRIPTS / script), *args],
            log=log,
            pipes=True,
            cwd=log.parent,
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"peer-{script}")
        self._reader.start()

    def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        for line in stdout:
            self._lines.put(line)
        self._lines.put(None)

    def call(self, op: str, timeout: float = 120.0, **args: Any) -> dict[str, Any]:
        """Send one command and return its JSON answer."""
        stdin = self._process.stdin
        assert stdin is not None
        try:
            stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
            stdin.flush()
        except OSError as exc:
            raise PeerWorkerError(f"{self.name} is gone: {exc}; {self.tail()}") from None
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise PeerWorkerError(f"{self.name} did not answer {op} in {timeout:g} s") from None
        if line is None:
            raise PeerWorkerError(f"{self.name} exited; {self.tail()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise PeerWorkerError(f"{self.name} {op}: {answer['error']}")
        return answer

    def tail(self, lines: int = 5) -> str:
        """The end of the worker's stderr log."""
        if not self.log.exists():
            return ""
        return " | ".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        """Ask the worker to exit (closing stdin), then reap it."""
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()
        try:
            self._process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=5)
