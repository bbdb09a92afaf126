"""Fixtures for integration tests: a real server process per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.server import ServerProcess


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server that is not started yet (the test chooses its environment)."""
    server = ServerProcess(tmp_path)
    yield server
    server.cleanup()


@pytest.fixture
def server(server_process: ServerProcess) -> ServerProcess:
    """A started server with default settings."""
    return server_process.start()
