"""The client's state-directory rule must be the store's rule, case by case."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_workflows.client import paths as client_paths
from pi_workflows.store import paths as store_paths


@pytest.mark.parametrize(
    "environ",
    [
        {"PI_WORKFLOWS_HOME": "/srv/pw-home", "XDG_STATE_HOME": "/xdg"},
        {"PI_WORKFLOWS_HOME": "~/pw"},
        {"PI_WORKFLOWS_HOME": "relative/home"},
        {"PI_WORKFLOWS_HOME": "", "XDG_STATE_HOME": "/xdg/state"},
        {"XDG_STATE_HOME": "~/xdg"},
        {"XDG_STATE_HOME": ""},
        {},
    ],
)
def test_client_state_home_agrees_with_the_store(
    environ: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For every combination of variables, client and store resolve the same directory."""
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))
    monkeypatch.chdir(tmp_path)
    assert client_paths.state_home(environ) == store_paths.state_home(environ)


def test_client_state_home_reads_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an explicit mapping, `PI_WORKFLOWS_HOME` from the environment wins."""
    monkeypatch.setenv("PI_WORKFLOWS_HOME", str(tmp_path / "h"))
    assert client_paths.state_home() == tmp_path / "h"
    assert client_paths.state_home() == store_paths.state_home()


def test_socket_and_log_names_agree_with_the_store(tmp_path: Path) -> None:
    """The socket and the log directory have the names the store and server use."""
    assert client_paths.socket_path(tmp_path).name == store_paths.SOCKET_NAME
    assert client_paths.log_path(tmp_path).parent.name == store_paths.LOG_DIR_NAME
