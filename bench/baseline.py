"""A recorded baseline commit, measured beside this checkout in the same bench invocation.

Runs in the bench process. ``--baseline REV`` (default: the commit named in
``bench/baseline.txt``; ``--baseline none`` to skip) extracts that commit's ``src/`` with
``git archive`` into the invocation's temp directory. A server started with
``Baseline.env`` (``PYTHONPATH`` = that ``src``, ahead of the checkout's editable install)
runs the baseline's server, runner template, runners and resolvers (they inherit the
server's environment); the CLI run with it is the baseline's CLI. The bench's own client
stays this checkout's (protocol v1 on both sides). The sections that measure the baseline
(``nodes``, ``parked`` with its CLI timings) interleave or follow it in the same run, so
the targets table can compare this commit with it (``targets.py``: the ``vsBaseline``
rows) and the next regression shows there.
"""

from __future__ import annotations

import subprocess
import tarfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDED = Path(__file__).resolve().parent / "baseline.txt"


@dataclass(frozen=True)
class Baseline:
    """A baseline commit whose ``src/`` was extracted to ``src``."""

    rev: str
    commit: str
    subject: str
    src: Path

    @property
    def env(self) -> dict[str, str]:
        """What a server (and the CLI) needs to run the baseline's code."""
        return {"PYTHONPATH": str(self.src)}

    def describe(self) -> dict[str, str]:
        """The JSON record of the baseline."""
        return {"rev": self.rev, "commit": self.commit, "subject": self.subject}


def recorded() -> str | None:
    """The revision ``bench/baseline.txt`` names (its first line that is not a comment)."""
    if not RECORDED.exists():
        return None
    for line in RECORDED.read_text().splitlines():
        word = line.split("#", 1)[0].strip()
        if word:
            return word
    return None


def _git(*args: str) -> bytes:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=True, capture_output=True, timeout=60
    ).stdout


def prepare(rev: str, tmp: Path) -> Baseline:
    """Extract ``rev``'s ``src/`` under ``tmp``; ``ValueError`` when git cannot find it."""
    try:
        commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}").decode().strip()
        subject = _git("log", "-1", "--format=%s", commit).decode().strip()
        archive = _git("archive", "--format=tar", commit, "src")
    except (OSError, subprocess.SubprocessError) as exc:
        raise ValueError(f"cannot extract the baseline {rev!r} with git: {exc}") from None
    target = tmp / "baseline" / commit[:12]
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target)  # our own repository's tree
    return Baseline(rev, commit, subject, target / "src")
