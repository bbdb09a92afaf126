"""Campaign mode of the protocol fuzzers: `python -m campaign --fuzz N`.

Runs in the campaign's parent process. The fuzzers themselves are the tests in
`tests/protocol/test_fuzz_*.py` (the client frame decoder, the runner message decoder, and
the server over a real socket with a bystander client); `make test` runs them with a fixed
modest budget. Here they run with `CAMPAIGN_FUZZ_BUDGET=N` (N inputs per target, fresh
random examples) and report how many inputs each target actually saw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parent.parent
TARGETS: Final = (
    "tests/protocol/test_fuzz_decoders.py",
    "tests/protocol/test_fuzz_server_socket.py",
)


def run_fuzz(budget: int, *, quiet: bool = False) -> dict[str, Any]:
    """Run every fuzz target with `budget` inputs each; return the report's `fuzz` entry."""
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pwc-fuzz-") as tmp:
        tally_path = Path(tmp) / "tally.jsonl"
        env = dict(os.environ)
        env["CAMPAIGN_FUZZ_BUDGET"] = str(budget)
        env["CAMPAIGN_FUZZ_TALLY"] = str(tally_path)
        argv = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "--timeout", "7200", *TARGETS,
        ]  # fmt: skip
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        tallies = (
            [json.loads(line) for line in tally_path.read_text().splitlines()]
            if tally_path.exists()
            else []
        )
    if not quiet:
        print(done.stdout[-2000:])
    by_target = {t["target"]: t["inputs"] for t in tallies}
    return {
        "budgetPerTarget": budget,
        "inputs": sum(by_target.values()),
        "byTarget": by_target,
        "seconds": round(time.monotonic() - began, 1),
        "passed": done.returncode == 0 and all(n >= budget for n in by_target.values()),
        "pytestExit": done.returncode,
        "output": done.stdout.strip().splitlines()[-20:],
    }
