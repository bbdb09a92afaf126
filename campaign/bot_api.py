"""A Telegram Bot API stand-in on loopback, for the channel tests and the campaign's
Telegram seat (`campaign/telegram.py`).

It speaks the Bot API's HTTP shape (`POST /bot<token>/<method>`, form or JSON parameters,
`{"ok": true, "result": ...}` or `{"ok": false, "error_code", "description", "parameters"}`)
for the methods the channel uses: `getMe`, `getUpdates` (long polling with `offset` and
`timeout`: updates below the offset are confirmed and dropped, as Telegram does),
`sendMessage`, `editMessageText`, `answerCallbackQuery`. Objects follow the Bot API's
JSON (Message, User, Chat, CallbackQuery, Update). A test pushes updates as a person would
cause them (`press`, `reply`) and can make the next call of a method answer 429 with
`retry_after` (`limit_next`). It records every update it pushed (`pushed`) and every time
`getUpdates` delivered one (`delivered`), so a caller can compare them with what the
channel handled. It runs in a thread with its own event loop; a test or the campaign
driver calls it from its own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

BOT_ID = 777000111
BOT_USER = {"id": BOT_ID, "is_bot": True, "first_name": "Workflows", "username": "wf_test_bot"}


@dataclass
class Sent:
    """A message the bot sent (and its edits)."""

    message_id: int
    chat_id: str
    text: str
    reply_markup: dict[str, Any] | None
    edits: list[str] = field(default_factory=list)


class BotApi:
    """The stand-in; `url` is the base to give as `--api-base`."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.updates: list[dict[str, Any]] = []  # not yet confirmed
        self.next_update = 1000
        self.next_message = 1
        self.sent: dict[int, Sent] = {}
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.callback_answers: list[dict[str, Any]] = []
        self.limited: dict[str, int] = {}  # method -> retry_after for its next call
        self.limited_answered: list[tuple[str, float]] = []
        self.confirmed: list[int] = []  # update ids confirmed by a later offset
        self.pushed: list[int] = []  # every update id pushed, in order
        self.delivered: list[int] = []  # update ids getUpdates answered with (repeats kept)
        self.polls = 0
        self.closing = False
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._changed: asyncio.Condition | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._ready = threading.Event()

    # --- life ----------------------------------------------------------------------------

    def start(self) -> BotApi:
        self._thread.start()
        assert self._ready.wait(10), "the Bot API stand-in did not start"
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._start())
        self._ready.set()
        self._loop.run_forever()

    async def _start(self) -> None:
        self._changed = asyncio.Condition()
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    def close(self) -> None:
        async def stop() -> None:
            self.closing = True
            assert self._changed is not None
            async with self._changed:
                self._changed.notify_all()  # long polls under way answer now
            if self._runner is not None:
                await self._runner.cleanup()
            current = asyncio.current_task()
            rest = [t for t in asyncio.all_tasks() if t is not current]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # --- what a test does ----------------------------------------------------------------

    def _push(self, update: dict[str, Any]) -> int:
        with self._lock:
            update_id = self.next_update
            self.next_update += 1
            self.updates.append({"update_id": update_id, **update})
            self.pushed.append(update_id)

        async def notify() -> None:
            assert self._changed is not None
            async with self._changed:
                self._changed.notify_all()

        asyncio.run_coroutine_threadsafe(notify(), self._loop).result(10)
        return update_id

    @staticmethod
    def user(user_id: int) -> dict[str, Any]:
        return {"id": user_id, "is_bot": False, "first_name": f"U{user_id}",
                "username": f"user{user_id}"}  # fmt: skip

    def _message_json(self, sent: Sent) -> dict[str, Any]:
        data: dict[str, Any] = {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "chat": self._chat(sent.chat_id),
            "from": BOT_USER,
            "text": sent.edits[-1] if sent.edits else sent.text,
        }
        if sent.reply_markup and "inline_keyboard" in sent.reply_markup and not sent.edits:
            data["reply_markup"] = sent.reply_markup  # only inline keyboards are echoed
        return data

    @staticmethod
    def _chat(chat_id: str) -> dict[str, Any]:
        number = int(chat_id)
        return {"id": number, "type": "group" if number < 0 else "private", "title": "ops"}

    def press(self, user_id: int, message_id: int, data: str) -> int:
        """A person presses an inline button of message `message_id`; the update's id."""
        sent = self.sent[message_id]
        return self._push(
            {
                "callback_query": {
                    "id": f"cq{self.next_update}",
                    "from": self.user(user_id),
                    "message": self._message_json(sent),
                    "chat_instance": "ci1",
                    "data": data,
                }
            }
        )

    def reply(self, user_id: int, to_message_id: int, text: str) -> int:
        """A person replies `text` to message `to_message_id`; the update's id."""
        sent = self.sent[to_message_id]
        with self._lock:
            message_id = self.next_message
            self.next_message += 1
        return self._push(
            {
                "message": {
                    "message_id": message_id,
                    "date": int(time.time()),
                    "chat": self._chat(sent.chat_id),
                    "from": self.user(user_id),
                    "text": text,
                    "reply_to_message": self._message_json(sent),
                }
            }
        )

    def limit_next(self, method: str, retry_after: int) -> None:
        """The next call of `method` answers 429 Too Many Requests with `retry_after`."""
        with self._lock:
            self.limited[method] = retry_after

    def decision_messages(self) -> list[Sent]:
        """Messages sent with inline buttons (decision messages), oldest first."""
        with self._lock:
            return [s for s in self.sent.values() if s.reply_markup and "inline_keyboard"
                    in s.reply_markup]  # fmt: skip

    def edits_of(self, message_id: int) -> list[str]:
        """The texts message `message_id` was edited to, oldest first."""
        with self._lock:
            sent = self.sent.get(message_id)
            return list(sent.edits) if sent is not None else []

    def updates_seen(self) -> tuple[list[int], list[int], list[int]]:
        """Copies of the update ids pushed, delivered and confirmed, taken together."""
        with self._lock:
            return list(self.pushed), list(self.delivered), list(self.confirmed)

    def texts(self) -> list[str]:
        with self._lock:
            return [s.text for s in self.sent.values()]

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        with self._lock:
            return [p for m, p in self.calls if m == method]

    # --- the API -------------------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            loaded = await request.json()
            return dict(loaded) if isinstance(loaded, dict) else {}
        form = await request.post()
        params: dict[str, Any] = {}
        for key, value in form.items():
            text = str(value)
            try:
                params[key] = json.loads(text)
            except ValueError:
                params[key] = text
        return params

    @staticmethod
    def _ok(result: Any) -> web.Response:
        return web.json_response({"ok": True, "result": result})

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return web.json_response(
                {"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401
            )
        method = request.match_info["method"]
        params = await self._params(request)
        with self._lock:
            self.calls.append((method, params))
            retry_after = self.limited.pop(method, None)
        if retry_after is not None:
            self.limited_answered.append((method, time.monotonic()))
            return web.json_response(
                {
                    "ok": False,
                    "error_code": 429,
                    "description": f"Too Many Requests: retry after {retry_after}",
                    "parameters": {"retry_after": retry_after},
                },
                status=429,
            )
        match method:
            case "getMe":
                return self._ok(BOT_USER)
            case "getUpdates":
                return self._ok(await self._get_updates(params))
            case "sendMessage":
                return self._ok(self._send(params))
            case "editMessageText":
                return self._edit(params)
            case "answerCallbackQuery":
                with self._lock:
                    self.callback_answers.append(params)
                return self._ok(True)
        return web.json_response(
            {"ok": False, "error_code": 404, "description": "Not Found: method not found"},
            status=404,
        )

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        timeout = min(float(params.get("timeout") or 0), 30.0)
        with self._lock:
            self.polls += 1
            kept = [u for u in self.updates if u["update_id"] >= offset]
            self.confirmed += [u["update_id"] for u in self.updates if u["update_id"] < offset]
            self.updates = kept
        assert self._changed is not None
        deadline = time.monotonic() + timeout
        async with self._changed:
            while True:
                with self._lock:
                    found = [u for u in self.updates if u["update_id"] >= offset]
                if found or self.closing or time.monotonic() >= deadline:
                    with self._lock:
                        self.delivered += [u["update_id"] for u in found]
                    return found
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), deadline - time.monotonic())

    def _send(self, params: dict[str, Any]) -> dict[str, Any]:
        markup = params.get("reply_markup")
        with self._lock:
            message_id = self.next_message
            self.next_message += 1
            sent = Sent(message_id, str(params["chat_id"]), str(params["text"]),
                        markup if isinstance(markup, dict) else None)  # fmt: skip
            self.sent[message_id] = sent
        return self._message_json(sent)

    def _edit(self, params: dict[str, Any]) -> web.Response:
        with self._lock:
            sent = self.sent.get(int(params.get("message_id") or 0))
            if sent is None:
                return web.json_response(
                    {"ok": False, "error_code": 400,
                     "description": "Bad Request: message to edit not found"},
                    status=400,
                )  # fmt: skip
            sent.edits.append(str(params["text"]))
        return self._ok(self._message_json(sent))
