"""The server's entry point: ``pi-workflows server run`` and ``python -m pi_workflows.server``.

Runs in the server process. Takes the state directory's lock, opens the database, and runs
the asyncio server until it stops. Problems that stop it from starting are one line on
stderr and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from pi_workflows.server.app import Server
from pi_workflows.server.config import ServerConfig
from pi_workflows.server.errors import ServerAlreadyRunningError
from pi_workflows.server.lock import ServerLock
from pi_workflows.store.database import Database, open_database
from pi_workflows.store.errors import StateIdentityError
from pi_workflows.store.paths import LOCK_NAME, ensure_private_dir, state_home

EXIT_ALREADY_RUNNING = 4
EXIT_BAD_STATE = 1


def run(home: Path | None = None) -> int:
    """Run a server for ``home`` (default: the state directory) until it stops."""
    home = (home or state_home()).absolute()
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = ServerConfig.from_environment(home)
        ensure_private_dir(home)
        lock = ServerLock.acquire(home / LOCK_NAME)
    except ServerAlreadyRunningError as exc:
        print(f"pi-workflows: error: {exc}", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    except (ValueError, PermissionError) as exc:
        print(f"pi-workflows: error: {exc}", file=sys.stderr)
        return EXIT_BAD_STATE
    try:
        db = open_database(home, lease_ms=config.lease_ms)
    except StateIdentityError as exc:
        lock.release()
        print(f"pi-workflows: error: {exc}", file=sys.stderr)
        return EXIT_BAD_STATE
    try:
        return asyncio.run(_serve(db, config))
    finally:
        db.close()
        lock.release()


async def _serve(db: Database, config: ServerConfig) -> int:
    return await Server(db, config).serve()


def main(argv: list[str] | None = None) -> int:
    """``python -m pi_workflows.server run [--home DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m pi_workflows.server")
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run the server attached to this terminal")
    run_parser.add_argument("--home", type=Path, default=None, help="the state directory")
    args = parser.parse_args(argv)
    return run(args.home)
