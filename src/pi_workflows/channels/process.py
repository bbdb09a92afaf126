"""The channel process (`python -m pi_workflows.channels --home DIR`): startup, serve,
shutdown.

Runs as a child of the server (`server/channel_process.py` starts and restarts it), a
client of that server like the web page, never a reader of the database. It serves every
configured channel: each Telegram channel's long poll runs as its own task, and one
dispatch pass, run when the server pushes a change of the run list (and at least every
`DISPATCH_SECONDS`), hands each channel what its audiences address to it:

- open decisions (`interaction.list`): a Telegram channel posts them with buttons; a notice
  channel gets a "needs a person" notice;
- notices of the server's feed (`channel.feed`: `notify` messages and the ends of runs)
  after the channel's own cursor, recorded since the channel was added (it is not sent
  the past).

It ends on SIGTERM, when its stdin (a pipe only the server holds) closes, or when the
server's connection ends; the server starts it again. Exit status 3: the channels extra is
not installed (one line on stderr says so).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Final

from pi_workflows.channels import config as cfg
from pi_workflows.channels.state import write_status

__all__ = ["CLIENT_ID", "main"]

log = logging.getLogger("pi_workflows.channels")

CLIENT_ID: Final = "channels"
"""The channel process's client id: the history names its answers `client:channels (...)`."""
DISPATCH_SECONDS: Final = 5.0
EXIT_MISSING_EXTRA: Final = 3
LOG_NAME: Final = "channels.log"
LOCK_NAME: Final = "process.lock"
LOCK_WAIT_SECONDS: Final = 30.0


def _link_maker(home: Path) -> Any:
    """Links to a run's page: `PI_WORKFLOWS_CHANNEL_WEB_URL` (a base URL the person can
    reach), else the page this state directory serves on 127.0.0.1, if any."""
    base = os.environ.get("PI_WORKFLOWS_CHANNEL_WEB_URL")

    def link(run_id: str) -> str | None:
        if base:
            return f"{base.rstrip('/')}/runs/{run_id}"
        try:
            port = int(json.loads((home / "ui.json").read_text())["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return f"http://127.0.0.1:{port}/runs/{run_id}"

    return link


class Dispatcher:
    """Runs the dispatch passes for every channel of one configuration."""

    def __init__(self, home: Path, config: cfg.Channels, client: Any, status: Any) -> None:
        from pi_workflows.channels.notices import NoticeChannel  # noqa: PLC0415 - the extra
        from pi_workflows.channels.telegram import TelegramChannel  # noqa: PLC0415

        self.home = home
        self.config = config
        self.client = client
        self.link = _link_maker(home)
        self.telegram: dict[str, TelegramChannel] = {}
        self.notices: dict[str, NoticeChannel] = {}
        for name, channel in config.channels.items():
            if channel.kind == "telegram":
                self.telegram[name] = TelegramChannel(channel, home, client, status, self.link)
            else:
                self.notices[name] = NoticeChannel(channel, home, status)

    def owners(self) -> list[Any]:
        """Every channel (Telegram and notices): each has `name`, `ledger`, `send_notices`."""
        return [*self.telegram.values(), *self.notices.values()]

    def _reaches(self, channel: str, audience: str | None) -> bool:
        return channel in self.config.audience(audience).channel_names

    async def dispatch(self) -> None:
        """One pass over open decisions and new notices, for every channel."""
        from pi_workflows.channels.notices import (  # noqa: PLC0415 - the extra
            needs_person_text,
            notice_text,
            wanted,
        )

        listed = (await self.client.call("interaction.list", {"limit": 1000}))["interactions"]
        open_items = [
            i for i in listed if i.get("kind") == "decision" or i.get("forPerson") is True
        ]

        def audience_of(item: dict[str, Any]) -> str | None:
            request = item.get("request")
            found = request.get("audience") if isinstance(request, dict) else None
            return found if isinstance(found, str) else None

        for name, telegram in self.telegram.items():
            mine = [i for i in open_items if self._reaches(name, audience_of(i))]
            await telegram.post_decisions([i for i in mine if i.get("kind") == "decision"])
            questions = [i for i in mine if i.get("kind") != "decision"]
            await telegram.send_notices(
                [(f"ask:{i['requestId']}", needs_person_text(i, self.link(i["runId"])))
                 for i in questions]
            )  # fmt: skip
            await telegram.settle_all()
        for name, notice in self.notices.items():
            mine = [i for i in open_items if self._reaches(name, audience_of(i))]
            await notice.send_notices(
                [(f"ask:{i['requestId']}", needs_person_text(i, self.link(i["runId"])))
                 for i in mine]
            )  # fmt: skip
        for ledger_owner in self.owners():
            ledger = ledger_owner.ledger
            added_at = self.config.channels[ledger_owner.name].added_at
            page = await self.client.call("channel.feed", {"after": ledger.cursor, "limit": 500})
            items = []
            for message in page["messages"]:
                body = message.get("body") if isinstance(message.get("body"), dict) else {}
                audience = body.get("audience") if isinstance(body, dict) else None
                if (
                    wanted(message)
                    and self._reaches(ledger_owner.name, audience)
                    and int(message.get("createdAt") or 0) >= added_at
                ):
                    items.append((str(message["messageId"]), notice_text(message)))
            if items:
                await ledger_owner.send_notices(items)
            ledger.cursor = int(page["next"])
            ledger.save()
            if len(page["messages"]) >= 500:
                await asyncio.sleep(0)  # more to read: the next pass goes on at once


async def _serve(home: Path, stop: asyncio.Event) -> int:
    from pi_workflows.channels.sending import quiet_libraries  # noqa: PLC0415 - the extra
    from pi_workflows.channels.status import StatusBoard  # noqa: PLC0415
    from pi_workflows.client import AsyncClient, ClientError  # noqa: PLC0415

    quiet_libraries()
    config = cfg.load(home)
    status = StatusBoard(home, sorted(config.channels))
    client = AsyncClient(home, client_id=CLIENT_ID, autostart=False, timeout=30.0)
    dispatcher = Dispatcher(home, config, client, status)
    wake = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []
    try:
        for telegram in dispatcher.telegram.values():
            tasks.append(asyncio.create_task(_guarded(telegram, stop, status)))
        tasks.append(asyncio.create_task(_follow(client, wake, stop)))
        while not stop.is_set():
            try:
                await dispatcher.dispatch()
            except ClientError as exc:
                if exc.code in ("serverUnavailable", "connectionLost", "noServer"):
                    raise
                log.warning("a dispatch pass failed: %s", exc.message)
            wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DISPATCH_SECONDS):
                    waits = [asyncio.ensure_future(wake.wait()), asyncio.ensure_future(stop.wait())]
                    try:
                        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        for waiting in waits:
                            waiting.cancel()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for telegram in dispatcher.telegram.values():
            await telegram.close()
        await client.close()
    return 0


async def _guarded(telegram: Any, stop: asyncio.Event, status: Any) -> None:
    """A Telegram channel's poll loop; a failure of its start is shown and tried again."""
    pause = 1.0
    while not stop.is_set():
        try:
            await telegram.run(stop)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            status.set(telegram.name, "failing", telegram._problem(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)
            pause = min(60.0, pause * 2)


async def _follow(client: Any, wake: asyncio.Event, stop: asyncio.Event) -> None:
    """Wake the dispatcher at every pushed change of the run list; stop when the server's
    connection ends (the server starts a new channel process)."""
    try:
        async with await client.watch_runs(limit=200) as watch:
            while not stop.is_set():
                view = await watch.next_view(None)
                if view is None:
                    break
                wake.set()
    except Exception as exc:
        log.warning("the server's run list watch ended: %s", exc)
    stop.set()


def _stdin_closed(stop: asyncio.Event) -> None:
    """The server holds our stdin: its end means the server is gone."""
    loop = asyncio.get_running_loop()

    def readable() -> None:
        try:
            data = os.read(0, 4096)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(0)
            stop.set()

    with contextlib.suppress(OSError, ValueError, NotImplementedError, PermissionError):
        loop.add_reader(0, readable)


def _one_process(home: Path) -> int:
    """Take `<state dir>/channels/process.lock` (held until exit), waiting up to
    `LOCK_WAIT_SECONDS` for an earlier channel process (of a server that just died) to end:
    one process only ever writes the ledgers and polls a bot. The descriptor to keep open."""
    folder = cfg.channels_dir(home)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise RuntimeError(
                    "another channel process still runs for this state directory"
                ) from None
            time.sleep(0.2)


async def _main(home: Path) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    _stdin_closed(stop)
    return await _serve(home, stop)


def _logging(home: Path) -> None:
    logs = home / "logs"
    logs.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = logs / LOG_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    handler = logging.StreamHandler(os.fdopen(fd, "a", encoding="utf-8"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def main(argv: list[str] | None = None) -> None:
    """Entry point of `python -m pi_workflows.channels`."""
    parser = argparse.ArgumentParser(prog="python -m pi_workflows.channels")
    parser.add_argument("--home", type=Path, required=True)
    args = parser.parse_args(argv)
    home = args.home.absolute()
    try:
        import apprise  # noqa: F401, PLC0415 - only to say the extra is missing
        import telegram  # noqa: F401, PLC0415
    except ImportError as exc:
        print(
            f"pi-workflows channels: the channels extra is not installed ({exc});"
            " install 'pi-workflows[channels]'",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(EXIT_MISSING_EXTRA)
    _logging(home)
    try:
        lock = _one_process(home)
    except RuntimeError as exc:
        print(f"pi-workflows channels: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    try:
        code = asyncio.run(_main(home))
    except cfg.ChannelConfigError as exc:
        print(f"pi-workflows channels: {exc.message}", file=sys.stderr, flush=True)
        sys.exit(1)
    except Exception as exc:
        log.exception("the channel process failed")
        print(f"pi-workflows channels: {type(exc).__name__}: {exc}"[:400], file=sys.stderr)
        with contextlib.suppress(OSError):
            write_status(home, {})
        sys.exit(1)
    finally:
        os.close(lock)
    sys.exit(code)
