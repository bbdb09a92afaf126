"""Two checks of `pi-workflows pi doctor` about what Pi reaches while it works: the model's
endpoint accepts a connection (`endpoint`), and the programs Pi's `grep` and `find` tools
run, `rg` and `fd`, are there (`tools`, a warning).

Runs in the CLI process. It opens one TCP connection to the endpoint's host and port and
closes it at once (no request is sent, no credential used), and only looks for files; it
starts nothing and changes nothing.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from pi_workflows.cli.pi_doctor_check import Check

__all__ = ["CONNECT_TIMEOUT_SECONDS", "check_endpoint", "check_tools"]

CONNECT_TIMEOUT_SECONDS: Final = 5.0
"""How long the endpoint check waits for a connection to be accepted."""

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}

_TOOLS: Final = (
    ("rg", ("rg",), "grep", "ripgrep"),
    ("fd", ("fd", "fdfind"), "find", "fd-find"),
)
"""(program, the names Pi looks for on PATH, the Pi tool that runs it, its Debian package):
Pi takes `<agent>/bin/NAME` first, then these names on PATH (Pi 1.6 `tools-manager`)."""


def check_endpoint(model: str | None, base_url: str | None) -> Check:
    """The selected model's endpoint (`baseUrl`, as Pi reports it) accepts a TCP
    connection. Not checked (and passed) when Pi reports no URL."""
    if model is None:
        return Check(
            "endpoint",
            False,
            "not checked: Pi has no model",
            "fix the model check, then run `pi-workflows pi doctor` again",
        )
    if not base_url:
        return Check("endpoint", True, f"not checked: Pi reports no URL for {model}")
    parts = urlsplit(base_url)
    try:
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        return Check(
            "endpoint",
            False,
            f"{model}'s URL {base_url} names no host and port",
            "correct its baseUrl in models.json",
        )
    try:
        with socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_SECONDS):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if isinstance(exc, TimeoutError):
            reason = f"no answer within {CONNECT_TIMEOUT_SECONDS:g} s"
        return Check(
            "endpoint",
            False,
            f"{base_url} ({model}) does not accept a connection: {reason}",
            f"start the model's server at {parts.hostname}:{port}, or correct the baseUrl"
            " of the provider in models.json (or select another model in settings.json)",
        )
    return Check("endpoint", True, f"{base_url} ({model}) accepts a connection")


def check_tools(agent: Path, env: Mapping[str, str]) -> Check:
    """`rg` and `fd` are where Pi looks for them; a missing one is a warning with the fix
    (Pi downloads them when it is online, so an offline Pi's `grep` and `find` fail)."""
    search = env.get("PATH", os.defpath)
    found: list[str] = []
    missing: list[tuple[str, str, str]] = []
    for program, names, tool, package in _TOOLS:
        local = agent / "bin" / program
        at = str(local) if local.is_file() and os.access(local, os.X_OK) else None
        for name in names:
            at = at or shutil.which(name, path=search)
        if at is None:
            missing.append((program, tool, package))
        else:
            found.append(f"{program} ({at})")
    if not missing:
        return Check("tools", True, ", ".join(found))
    programs = " and ".join(program for program, _, _ in missing)
    tools = " and ".join(f"`{tool}`" for _, tool, _ in missing)
    packages = " ".join(package for _, _, package in missing)
    return Check(
        "tools",
        True,
        f"no {programs} on PATH or in {agent / 'bin'}: Pi's {tools} tool"
        f"{'s' if len(missing) > 1 else ''} fail offline (Pi downloads them only when online)",
        f"install them: apt-get install {packages} (Debian, Ubuntu), brew install"
        f" {' '.join(p if p != 'fd-find' else 'fd' for _, _, p in missing)} (macOS), or put"
        f" {programs} in {agent / 'bin'}",
        warning=True,
    )
