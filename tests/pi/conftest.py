"""Fixtures for the Pi tests: a real server, the scripted model, and real Pi processes.

Each test gets a short private root directory (the server's socket path must stay under the
107-byte limit), a started pi-workflows server in it, a started `MockProvider`, and a `pi`
factory whose Pi processes all run in the server's project directory with the server's state
directory, and are stopped at teardown.

Under `make test` (pytest-xdist, `--dist loadgroup`) every test of this directory is in the
xdist group `pi`, so one worker runs them one after another (docs/testing.md): a Pi start
costs a few hundred milliseconds on a quiet machine and seconds on a loaded one, and several
at once on two cores would only make each slower.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pi.support.mock_provider import MockProvider
from pi.support.pi_rpc import MakePi, PiProcess, require_pi

from support.server import ServerProcess

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every Pi test in the xdist group `pi` (the hook sees the whole session's items,
    so it marks only those under this directory)."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.xdist_group("pi"))


@pytest.fixture
def root() -> Iterator[Path]:
    """A short private directory for one test, removed afterwards."""
    require_pi()
    path = Path(tempfile.mkdtemp(prefix="pwpi-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server(root: Path) -> Iterator[ServerProcess]:
    """A started pi-workflows server with its own state directory and project."""
    process = ServerProcess(root)
    try:
        yield process.start()
    finally:
        process.cleanup()


@pytest.fixture
def provider() -> Iterator[MockProvider]:
    """The scripted OpenAI-compatible model on 127.0.0.1."""
    with MockProvider() as mock:
        yield mock


@pytest.fixture
def make_pi(root: Path, server: ServerProcess, provider: MockProvider) -> Iterator[MakePi]:
    """Start a real Pi in the server's project, talking to the server and the mock model."""
    started: list[PiProcess] = []

    def make(**kwargs: Any) -> PiProcess:
        env = {"PI_WORKFLOWS_HOME": str(server.home), **kwargs.pop("env", {})}
        pi = PiProcess(root, provider, cwd=server.project, env=env, **kwargs)
        started.append(pi)
        return pi.start()

    try:
        yield make
    finally:
        for pi in started:
            pi.stop()
