"""`make test` runs the Pi tests one after another on one xdist worker (docs/testing.md).

The suite runs under pytest-xdist with `--dist loadgroup`; `tests/pi/conftest.py` puts every
test of this directory in the group `pi`. xdist carries a test's group in its id (`...@pi`),
which pytest 9.2 silently dropped (pytest-xdist issue #1386): this test runs a few cheap Pi
tests the way `make test` does and checks that they kept the group and shared one worker, so
a dependency upgrade that breaks the grouping fails here instead of slowing Pi down.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


def test_the_pi_tests_run_in_one_xdist_group_on_one_worker(tmp_path: Path) -> None:
    """Under `-n 2 --dist loadgroup`, every Pi test carries the group `pi` and all of them
    run on the same worker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PI_WORKFLOWS_"))}
    argv = [
        sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
        "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "basetemp"),
        "tests/pi/test_paths.py",
    ]  # fmt: skip
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d+)\] .*PASSED (\S+)", done.stdout, re.MULTILINE)
    assert len(ran) >= 2, done.stdout[-3000:]
    assert all(test_id.endswith("@pi") for _, test_id in ran), ran
    assert len({worker for worker, _ in ran}) == 1, ran
