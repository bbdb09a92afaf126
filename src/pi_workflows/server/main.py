"""The server's entry point: ``pi-workflows server run`` and ``python -m pi_workflows.server``.

Runs in the server process. Takes the state directory's lock, opens the database, and runs
the asyncio server until it stops. Problems that stop it from starting are one line on
stderr and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sqlite3
import sys
from pathlib import Path

from pi_workflows.server.app import Server
from pi_workflows.server.config import ServerConfig
from pi_workflows.server.errors import ServerAlreadyRunningError
from pi_workflows.server.lock import ServerLock
from pi_workflows.store.database import Database, open_database, storage_failure
from pi_workflows.store.errors import StateIdentityError, StateStorageError
from pi_workflows.store.paths import DATABASE_NAME, LOCK_NAME, ensure_private_dir, state_home

EXIT_ALREADY_RUNNING = 4
EXIT_BAD_STATE = 1
EXIT_STORAGE = 74  # EX_IOERR: the state directory's file system is full or failing


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
    except OSError as exc:
        if not storage_failure(exc):
            raise
        failure = StateStorageError(home / DATABASE_NAME, str(exc))
        print(f"pi-workflows: error: {failure}", file=sys.stderr)
        return EXIT_STORAGE
    try:
        db = open_database(home, lease_ms=config.lease_ms)
    except StateIdentityError as exc:
        lock.release()
        print(f"pi-workflows: error: {exc}", file=sys.stderr)
        return EXIT_BAD_STATE
    except StateStorageError as exc:
        lock.release()
        print(f"pi-workflows: error: {exc}", file=sys.stderr)
        return EXIT_STORAGE
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:  # damaged past its header
        lock.release()
        print(f"pi-workflows: error: {damaged_state(home, exc)}", file=sys.stderr)
        return EXIT_BAD_STATE
    try:
        return asyncio.run(_serve(db, config))
    except sqlite3.DatabaseError as exc:
        if storage_failure(exc):  # full disk at start-up: one line, and keep the state
            failure = StateStorageError(home / DATABASE_NAME, str(exc))
            print(f"pi-workflows: error: {failure}", file=sys.stderr)
            return EXIT_STORAGE
        if not is_corruption(exc):
            raise
        print(f"pi-workflows: error: {damaged_state(home, exc)}", file=sys.stderr)
        return EXIT_BAD_STATE
    finally:
        db.close()
        lock.release()


def is_corruption(exc: BaseException) -> bool:
    """Whether ``exc`` says the database file is damaged or is not a database at all."""
    name = getattr(exc, "sqlite_errorname", None)
    return isinstance(exc, UnicodeDecodeError) or name in ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def damaged_state(home: Path, exc: BaseException) -> StateIdentityError:
    """The reset instruction for a state database that is damaged (one line, no traceback)."""
    detail = exc.args[0] if isinstance(exc, sqlite3.Error) and exc.args else type(exc).__name__
    return StateIdentityError(home / DATABASE_NAME, f"is damaged and cannot be read ({detail})")


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
