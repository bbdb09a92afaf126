"""A scripted OpenAI-compatible chat-completions server for tests that run the real Pi.

Owns the fake model: a stdlib `ThreadingHTTPServer` on 127.0.0.1 (port chosen by the OS) that
answers `POST /v1/chat/completions` with a streamed reply (SSE `data:` chunks, tool-call header
then argument deltas, a `finish_reason`, a usage chunk, `data: [DONE]`). What it replies is a
function of the request: the first matching `Rule` wins, so a test scripts the model as
"when the last message is a tool result, say X" or "when the user asks to start, call the
`workflow` tool with these arguments", or "answer HTTP 500". Every request is logged for
assertions. It never opens a connection itself and serves only the loopback interface.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "REQUEST_ID",
    "ChatRequest",
    "MockProvider",
    "Reply",
    "Rule",
    "failure",
    "last_is_tool_result",
    "last_tool_result_contains",
    "request_id_in",
    "text",
    "tool_call",
    "user_text_contains",
    "user_text_matches",
]

REQUEST_ID = re.compile(r"\breq_[0-9A-Za-z]+")
"""A workflow request id, as step texts show it."""

MODEL_ID = "mock-model"
PROVIDER = "mock"
NO_RULE_TEXT = "(mock provider: no rule matched this request)"


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completions request body, with helpers to read what the model was sent."""

    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's messages, in order."""
        return list(self.body.get("messages") or [])

    @property
    def last(self) -> dict[str, Any]:
        """The last message (the one the model answers)."""
        return self.messages[-1] if self.messages else {}

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered to the model."""
        return [
            str(tool.get("function", {}).get("name"))
            for tool in self.body.get("tools") or []
            if isinstance(tool, dict)
        ]

    def tool(self, name: str) -> dict[str, Any] | None:
        """The declaration of the offered tool `name` (its `function` object), if offered."""
        for tool in self.body.get("tools") or []:
            function = tool.get("function", {}) if isinstance(tool, dict) else {}
            if function.get("name") == name:
                return dict(function)
        return None

    def user_texts(self) -> list[str]:
        """The text of every user message, oldest first."""
        return [message_text(m) for m in self.messages if m.get("role") == "user"]

    def last_user_text(self) -> str:
        """The text of the most recent user message, or ""."""
        texts = self.user_texts()
        return texts[-1] if texts else ""

    def tool_results(self) -> list[str]:
        """The text of every tool-result message, oldest first."""
        return [message_text(m) for m in self.messages if m.get("role") == "tool"]


def message_text(message: dict[str, Any]) -> str:
    """The text of one chat message, whether its content is a string or a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


@dataclass(frozen=True)
class Reply:
    """What the model answers: some text, or one tool call (with optional text before it);
    with an HTTP `status` other than 200, an OpenAI-style error whose message is `text`."""

    text: str = ""
    tool_name: str | None = None
    tool_arguments: dict[str, Any] | None = None
    status: int = 200


def text(value: str) -> Callable[[ChatRequest], Reply]:
    """A reply that is just `value`."""
    return lambda _request: Reply(text=value)


def failure(status: int, message: str) -> Callable[[ChatRequest], Reply]:
    """A provider error: HTTP `status` with `{"error": {"message": message}}`."""
    return lambda _request: Reply(text=message, status=status)


def tool_call(
    name: str, arguments: dict[str, Any] | Callable[[ChatRequest], dict[str, Any]]
) -> Callable[[ChatRequest], Reply]:
    """A reply calling tool `name` with `arguments` (or arguments computed from the request)."""

    def reply(request: ChatRequest) -> Reply:
        args = arguments(request) if callable(arguments) else arguments
        return Reply(tool_name=name, tool_arguments=args)

    return reply


def last_is_tool_result(request: ChatRequest) -> bool:
    """True when the model is answering a tool result."""
    return request.last.get("role") == "tool"


def user_text_matches(pattern: str) -> Callable[[ChatRequest], bool]:
    """True when the last message is the user's and its text matches `pattern` (re.search)."""
    compiled = re.compile(pattern)

    def check(request: ChatRequest) -> bool:
        return request.last.get("role") == "user" and bool(
            compiled.search(request.last_user_text())
        )

    return check


def user_text_contains(fragment: str) -> Callable[[ChatRequest], bool]:
    """True when the last message is the user's (or a custom message) and contains `fragment`."""

    def check(request: ChatRequest) -> bool:
        return request.last.get("role") == "user" and fragment in request.last_user_text()

    return check


def last_tool_result_contains(fragment: str) -> Callable[[ChatRequest], bool]:
    """True when the model answers a tool result whose text contains `fragment`."""

    def check(request: ChatRequest) -> bool:
        return last_is_tool_result(request) and fragment in message_text(request.last)

    return check


def request_id_in(value: str) -> str:
    """The first workflow request id in `value` (the step text names it); fails if none."""
    match = REQUEST_ID.search(value)
    assert match, f"no request id in {value!r}"
    return match.group(0)


@dataclass
class Rule:
    """When `when(request)` holds, answer with `reply(request)`; at most `times` times if set."""

    when: Callable[[ChatRequest], bool]
    reply: Callable[[ChatRequest], Reply]
    times: int | None = None
    used: int = 0
    name: str = ""


@dataclass
class LoggedRequest:
    """One request the provider received and the reply it chose."""

    path: str
    request: ChatRequest
    reply: Reply | None
    rule: str | None


@dataclass
class MockProvider:
    """The scripted model server; use as a context manager or call `start` and `stop`."""

    rules: list[Rule] = field(default_factory=list)
    log: list[LoggedRequest] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    # --- scripting -------------------------------------------------------------------------

    def on(
        self,
        when: Callable[[ChatRequest], bool],
        reply: Callable[[ChatRequest], Reply],
        *,
        times: int | None = None,
        name: str = "",
    ) -> Rule:
        """Add a rule after the existing ones (earlier rules win)."""
        rule = Rule(when=when, reply=reply, times=times, name=name or f"rule{len(self.rules) + 1}")
        with self._lock:
            self.rules.append(rule)
        return rule

    def requests(self) -> list[ChatRequest]:
        """Every chat-completions request received so far."""
        with self._lock:
            return [entry.request for entry in self.log if entry.path.endswith("/chat/completions")]

    def unmatched(self) -> list[ChatRequest]:
        """Chat requests that no rule answered."""
        with self._lock:
            return [
                entry.request
                for entry in self.log
                if entry.path.endswith("/chat/completions") and entry.rule is None
            ]

    # --- serving ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, `http://127.0.0.1:PORT/v1`."""
        assert self._server is not None, "the mock provider is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> MockProvider:
        """Listen on 127.0.0.1 on a free port and serve in a daemon thread."""
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet (requests are in the provider's log)."""

            def do_GET(self) -> None:
                provider._record(self.path, {}, None, None)
                self._send_json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send_json(400, {"error": {"message": "bad json"}})
                    return
                if not self.path.endswith("/chat/completions"):
                    provider._record(self.path, body, None, None)
                    self._send_json(404, {"error": {"message": "not found"}})
                    return
                reply, rule = provider._choose(ChatRequest(body))
                provider._record(self.path, body, reply, rule)
                if reply.status != 200:
                    error = {"message": reply.text, "type": "server_error", "code": None}
                    self._send_json(reply.status, {"error": error})
                    return
                self._stream(reply, bool(body.get("stream", True)))

            def _send_json(self, status: int, value: Any) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, reply: Reply, stream: bool) -> None:
                chunks = provider._chunks(reply)
                if not stream:
                    self._send_json(200, provider._whole(reply))
                    return
                self.close_connection = True
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for chunk in chunks:
                        self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # Pi aborted the request (Escape) while the reply was held

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="mock-provider", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> MockProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- Pi configuration ------------------------------------------------------------------

    def models_json(self) -> dict[str, Any]:
        """The `models.json` that makes Pi use this server as provider `mock`."""
        return {
            "providers": {
                PROVIDER: {
                    "baseUrl": self.base_url,
                    "api": "openai-completions",
                    "apiKey": "mock-key",
                    "compat": {"supportsDeveloperRole": False},
                    "models": [
                        {
                            "id": MODEL_ID,
                            "name": "Mock model",
                            "reasoning": False,
                            "input": ["text"],
                            "contextWindow": 128000,
                            "maxTokens": 4096,
                            "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                        }
                    ],
                }
            }
        }

    # --- internals -------------------------------------------------------------------------

    def _choose(self, request: ChatRequest) -> tuple[Reply, str | None]:
        with self._lock:
            rules = list(self.rules)
        for rule in rules:
            if rule.times is not None and rule.used >= rule.times:
                continue
            if rule.when(request):
                with self._lock:
                    rule.used += 1
                return rule.reply(request), rule.name
        return Reply(text=NO_RULE_TEXT), None

    def _record(
        self, path: str, body: dict[str, Any], reply: Reply | None, rule: str | None
    ) -> None:
        with self._lock:
            self.log.append(LoggedRequest(path, ChatRequest(body), reply, rule))

    def _chunks(self, reply: Reply) -> list[dict[str, Any]]:
        number = next(self._ids)
        base = {
            "id": f"chatcmpl-mock-{number}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": MODEL_ID,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        chunks = [chunk({"role": "assistant", "content": ""})]
        if reply.text:
            # Stream the text in two pieces, as a real provider would in several.
            middle = len(reply.text) // 2
            chunks += [
                chunk({"content": reply.text[:middle]}),
                chunk({"content": reply.text[middle:]}),
            ]
        if reply.tool_name is not None:
            call_id = f"call_mock_{number}"
            arguments = json.dumps(reply.tool_arguments or {})
            chunks.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": reply.tool_name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            step = max(1, len(arguments) // 3)
            for start in range(0, len(arguments), step):
                piece = arguments[start : start + step]
                chunks.append(
                    chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                )
            chunks.append(chunk({}, "tool_calls"))
        else:
            chunks.append(chunk({}, "stop"))
        chunks.append(
            {
                **base,
                "choices": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )
        return chunks

    def _whole(self, reply: Reply) -> dict[str, Any]:
        """A non-streamed completion (Pi streams; this is only a fallback)."""
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        finish = "stop"
        if reply.tool_name is not None:
            finish = "tool_calls"
            message["tool_calls"] = [
                {
                    "id": f"call_mock_{next(self._ids)}",
                    "type": "function",
                    "function": {
                        "name": reply.tool_name,
                        "arguments": json.dumps(reply.tool_arguments or {}),
                    },
                }
            ]
        return {
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL_ID,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
