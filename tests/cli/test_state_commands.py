"""`state diagnose|repair|backup` print the server's findings and exit by what was found."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from client.scripted_peer import ok, scripted_peer

Invoke = Callable[..., Result]

PROBLEM = {
    "code": "attemptWithoutRun",
    "runId": "run_1",
    "message": "attempt att_1 has no run",
    "repairable": True,
}


@pytest.mark.parametrize(("problems", "exit_code"), [([], 0), ([PROBLEM], 1)])
def test_diagnose_exits_0_when_clean_and_1_with_problems(
    invoke: Invoke, home: Path, problems: list[dict[str, Any]], exit_code: int
) -> None:
    """`state diagnose` exits 1 exactly when problems were found; `--json` prints them."""
    with scripted_peer(home, lambda _i, r: ok(r, {"problems": problems})) as peer:
        human = invoke("state", "diagnose")
        as_json = invoke("state", "diagnose", "--json")
    assert human.exit_code == as_json.exit_code == exit_code
    assert json.loads(as_json.stdout) == {"problems": problems}
    if problems:
        assert "attemptWithoutRun" in human.stdout
    else:
        assert human.stdout == "no problems found\n"
    assert [r.idempotency_key for _, r in peer.requests] == [None, None]


def test_repair_exits_1_while_problems_remain(invoke: Invoke, home: Path) -> None:
    """`state repair` prints fixed and remaining problems and exits 1 if any remain."""
    receipt = {"fixed": [PROBLEM], "remaining": [{**PROBLEM, "repairable": False}]}
    with scripted_peer(home, lambda _i, r: ok(r, receipt)) as peer:
        result = invoke("state", "repair", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == receipt
    assert peer.requests[0][1].idempotency_key


def test_backup_sends_an_absolute_path(
    invoke: Invoke, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`state backup PATH` resolves PATH against the current directory before sending it."""
    monkeypatch.chdir(tmp_path)
    target = str(tmp_path / "copy.sqlite")
    receipt = {"path": target, "bytes": 4096, "verified": True}
    with scripted_peer(home, lambda _i, r: ok(r, receipt)) as peer:
        result = invoke("state", "backup", "copy.sqlite")
    assert result.exit_code == 0
    assert result.stdout == f"backed up to {target} (4096 bytes, verified)\n"
    assert peer.requests[0][1].payload == {"path": target}
