"""Fixtures for store tests: a fake clock and a fresh state database in a temp dir."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pi_workflows.store import faults
from pi_workflows.store.clock import FakeClock
from pi_workflows.store.database import Database

from support.store import open_test_db


@pytest.fixture
def clock() -> FakeClock:
    """A frozen clock the test moves by hand."""
    return FakeClock()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A state directory inside the test's temp dir."""
    return tmp_path / "state"


@pytest.fixture
def db(home: Path, clock: FakeClock) -> Iterator[Database]:
    """An open state database; fault points are disarmed afterwards."""
    database = open_test_db(home, clock)
    yield database
    faults.disarm_all()
    database.close()
