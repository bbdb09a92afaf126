"""The page process: `python -m pi_workflows.web --home HOME --port N`.

Runs alone, detached from the `pi-workflows ui` that started it (`launcher.py`). A client
of the server like the CLI: it never opens the database and never starts a server. Its
life, in phases:

1. **startup**: take `ui.lock` (one page process per state directory; a second exits 4),
   read or make the access secret, connect to the server (none: exit 3), listen on
   127.0.0.1 only (the port taken: exit 5), open the run-list watch, write `ui.json`, and
   say `ready <port>` on stdout (then stdout is closed).
2. **serve**: until the server goes away (the run-list watch's connection ends) or a
   SIGTERM or SIGINT arrives (signal handlers only set an event).
3. **shutdown**: (1) remove `ui.json` if it is still ours; (2) close every server watch;
   (3) stop listening and end open requests and streams (at most `SHUTDOWN_SECONDS`);
   (4) close the read connections; (5) release the lock.

Logs go to stderr (the launcher appends it to `<state dir>/logs/ui.log`): never a request
line, never the secret.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Final

from aiohttp import web

from pi_workflows.client import ClientError
from pi_workflows.protocol.process_start import process_start
from pi_workflows.web.access import cookie_value, csrf_token, load_or_create_secret
from pi_workflows.web.app import build
from pi_workflows.web.clients import Clients
from pi_workflows.web.context import PageContext
from pi_workflows.web.launcher import EXIT_LOCKED, EXIT_PORT_IN_USE
from pi_workflows.web.live import Hub
from pi_workflows.web.record import PageRecord, hold_lock, remove_record, write_record
from pi_workflows.web.render import environment
from pi_workflows.web.run_page import render_sections

__all__ = ["EXIT_LOCKED", "EXIT_NO_SERVER", "main", "serve"]

log = logging.getLogger("pi_workflows.web")

EXIT_NO_SERVER: Final = 3
SHUTDOWN_SECONDS: Final = 3.0


def _ready(port: int) -> None:
    """Say `ready <port>` to the launcher, then let go of stdout."""
    os.write(1, f"ready {port}\n".encode())
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


async def serve(home: Path, port: int) -> int:
    """Run the page process's phases; its exit status."""
    # 1. startup
    lock = hold_lock(home)
    if lock is None:
        log.error("another page process serves %s; pi-workflows ui finds it", home)
        return EXIT_LOCKED
    try:
        secret = load_or_create_secret(home)
        clients = Clients(home)
        try:
            async with clients.reader() as client:
                hello = await client.connect()
        except ClientError as exc:
            log.error("no server to serve: %s", exc.message)
            await clients.close()
            return EXIT_NO_SERVER
        ctx = PageContext(
            env=environment(),
            clients=clients,
            hub=Hub(clients, lambda run_id, view: render_sections(ctx, run_id, view)),
            cookie=cookie_value(secret),
            csrf=csrf_token(secret),
            secret=secret,
            server={"pid": hello.server_pid, "epoch": hello.server_epoch,
                    "version": hello.server_version},
        )  # fmt: skip
        runner = web.AppRunner(build(ctx), access_log=None, handle_signals=False,
                               shutdown_timeout=SHUTDOWN_SECONDS)  # fmt: skip
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, reuse_address=False)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            await clients.close()
            if exc.errno == errno.EADDRINUSE:
                log.error("port %d on 127.0.0.1 is in use", port)
                return EXIT_PORT_IN_USE
            raise
        ctx.port = site.port
        lifetime = asyncio.create_task(ctx.hub.lifetime(), name="pi-workflows-ui-lifetime")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        started = process_start(os.getpid())
        assert started is not None
        write_record(
            home,
            PageRecord(os.getpid(), started, ctx.port, hello.server_pid, hello.server_epoch,
                       time.time()),
        )  # fmt: skip
        log.info("serving on 127.0.0.1:%d for the server pid %d", ctx.port, hello.server_pid)
        _ready(ctx.port)
        # 2. serve
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({lifetime, stopped}, return_when=asyncio.FIRST_COMPLETED)
        why = "a signal" if stop.is_set() else "its server went away"
        log.info("stopping: %s", why)
        # 3. shutdown
        remove_record(home, os.getpid())  # (1)
        for task in (lifetime, stopped):
            task.cancel()
        await ctx.hub.close()  # (2)
        await runner.cleanup()  # (3)
        await clients.close()  # (4)
        with contextlib.suppress(Exception):
            await lifetime
        return 0
    finally:
        os.close(lock)  # (5)


def main(argv: list[str] | None = None) -> None:
    """The page process's entry point."""
    parser = argparse.ArgumentParser(prog="python -m pi_workflows.web")
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s ui[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.access").disabled = True
    sys.exit(asyncio.run(serve(args.home.expanduser().absolute(), args.port)))
