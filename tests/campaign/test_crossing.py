"""The oracle can fail: the review's crossing on a build without the revision rule.

The `crossing` scenario is one seed's worth of the crossing alone: runs with an origin
session notify, then run a slow manual effect (and then a slow idempotent one); the seed's
session client presents and reports each notification while the effect's body runs. With
the rule turned off (`runs.presentation_moves_execution=flag` in the servers' environment)
that report moves the revision the runner is fenced by, so its `effect.settle` is refused:
the campaign must report it (a `refused` runner no injected fault explains). With the rule
on, the same seed is clean. Both run `python -m campaign` as `make campaign` does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEED = 11
RULE_OFF = "runs.presentation_moves_execution=flag"


def _campaign(out: Path, *extra: str) -> dict[str, Any]:
    argv = [
        sys.executable, "-m", "campaign", "--seed-list", str(SEED), "--scenario", "crossing",
        "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip
    subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    report: dict[str, Any] = json.loads((out / "latest.json").read_text())
    return report


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_crossing_without_the_revision_rule_is_a_violation(tmp_path: Path) -> None:
    """Rule off: the oracle reports the refused runner (and says how to re-run it)."""
    report = _campaign(tmp_path / "off", "--server-faults", RULE_OFF)
    kinds = {v["kind"] for v in report["violations"]}
    assert "unexplained" in kinds, report["violations"]
    refused = [v for v in report["violations"] if "ended refused" in v["message"]]
    assert refused, report["violations"]
    assert RULE_OFF in refused[0]["rerun"]
    assert "--scenario crossing" in refused[0]["rerun"]
    assert report["runsByWorkflow"] == {"notice": 2}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_same_crossing_with_the_rule_is_clean(tmp_path: Path) -> None:
    """Rule on: the same seed, the same reports mid-action, no violation."""
    report = _campaign(tmp_path / "on")
    assert report["violations"] == []
    assert report["runsByStatus"] == {"completed": 2}
