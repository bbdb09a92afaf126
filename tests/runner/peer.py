"""A scripted server peer for runner unit tests: the server's side of the runner protocol.

It spawns a real ``python -m pi_workflows.runner`` child over a real socketpair and answers
it exactly as ``docs/protocol.md`` ("Runner protocol v1") says, with a small in-memory model
of the run (revision, attempts, requests, effects). It checks every message the child sends
(identity, message ids, expected revision, documented payload keys) and records them, so a
test asserts on the conversation. Hooks let a test change one reply or act after one.
This is a protocol-level double; the end-to-end tests against the real server live in
``tests/server``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pi_workflows.protocol import (
    RUNNER_SCHEMA,
    ErrorInfo,
    FrameReader,
    Outcome,
    RunnerCommand,
    RunnerCommandKind,
    RunnerMessage,
    RunnerReply,
    decode_runner_message,
    effect_key,
    encode_frame,
    fingerprint,
)
from pi_workflows.sources import LoadedWorkflow, load, resolve

RUN_ID = "run_test"
GENERATION = 3
RUNNER_EPOCH = 7
READ_TIMEOUT = 30.0

# Payload keys the protocol table allows per message kind (required ones first).
REQUIRED: dict[str, set[str]] = {
    "ready": {"pid"},
    "state.get": set(),
    "node.start": {"nodeId", "timeoutMs"},
    "node.finish": {"attemptId", "outcome", "next"},
    "node.wait": {"attemptId", "kind", "request"},
    "node.update": {"attemptId", "body"},
    "node.logs": {"attemptId", "text", "bytes"},
    "run.park": {"reason", "detail"},
    "effect.reserve": {"attemptId", "effectType", "effectKind", "nodeId", "visit", "fingerprint"},
    "effect.settle": {"effectId", "status"},
    "process.register": {"pid", "processStart", "command"},
    "process.ended": {"pid"},
    "interaction.reject": {"submissionId", "error"},
    "blob.read": {"digest", "offset", "length"},
}
OPTIONAL: dict[str, set[str]] = {
    "node.finish": {
        "output",
        "error",
        "startNext",
        "timeoutMs",
        "message",
        "submissionId",
        "errorClass",
        "retryNote",
    },
    "node.wait": {"timeoutMs", "choices", "timeoutChoice"},
    "effect.settle": {"result", "error", "receipt"},
    "node.logs": {"traceback"},
    "node.update": {"published"},
}
READS = {"ready", "state.get", "blob.read"}


@dataclass
class Project:
    """A project with ``.pi/workflows``, a user workflow dir and a HOME for the child."""

    root: Path
    home: Path

    @property
    def workflows(self) -> Path:
        return self.root / ".pi" / "workflows"

    @property
    def user_dir(self) -> Path:
        return self.home / ".pi" / "agent" / "workflows"

    def write(self, relative: str, text: str) -> Path:
        """Write dedented ``text`` to ``relative`` under the workflows directory."""
        path = self.workflows / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return path

    def load(self, name: str) -> LoadedWorkflow:
        """Load ``name`` as the resolver does when a run starts (in this process)."""
        return load(resolve(name, self.root, self.user_dir))


def make_project(tmp_path: Path) -> Project:
    """An empty project and HOME inside ``tmp_path``."""
    project = Project(tmp_path / "project", tmp_path / "home")
    project.workflows.mkdir(parents=True)
    project.user_dir.mkdir(parents=True)
    return project


def envelope_for(loaded: LoadedWorkflow, project: Project, run_input: Any = None) -> dict[str, Any]:
    """The launch envelope the server would record for a run of ``loaded``."""
    identity = loaded.identity
    return {
        "runId": RUN_ID,
        "generation": GENERATION,
        "runnerEpoch": RUNNER_EPOCH,
        "serverEpoch": 1,
        "protocolVersion": 1,
        "workflowName": loaded.workflow.name,
        "projectDir": str(project.root.resolve()),
        "source": {
            "kind": identity.kind.value,
            "ref": identity.locator,
            "revision": identity.sha256,
            "mounted": dict(loaded.mounted),
        },
        "definitionDigest": loaded.digest,
        "inputHash": fingerprint(run_input),
        "leaseMs": 30000,
    }


def child_env(project: Project, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ours without ``PI_WORKFLOWS_*``, HOME in the temp dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PI_WORKFLOWS_")}
    env["HOME"] = str(project.home)
    env.update(extra or {})
    return env


def fresh_state(run_input: Any = None) -> dict[str, Any]:
    """The ``state.get`` reply of a run that has not executed anything."""
    return {
        "input": run_input,
        "stepCount": 0,
        "currentNode": None,
        "outputs": {},
        "results": {},
        "visits": {},
        "active": None,
    }


Hook = Callable[["ScriptedServer", RunnerMessage], "tuple[Outcome, dict[str, Any] | None] | None"]
After = Callable[["ScriptedServer", RunnerMessage], None]


@dataclass
class ScriptedServer:
    """Plays the server for one runner child; ``run()`` returns the child's exit code."""

    project: Project
    envelope: dict[str, Any]
    command: str = "start"
    state: dict[str, Any] = field(default_factory=fresh_state)
    stored_effects: dict[str, dict[str, Any]] = field(default_factory=dict)  # by nodeId
    hooks: dict[str, Hook] = field(default_factory=dict)  # kind -> replacement reply
    after: dict[str, After] = field(default_factory=dict)  # kind -> called after replying
    extra_env: dict[str, str] = field(default_factory=dict)
    messages: list[RunnerMessage] = field(default_factory=list)
    revision: int = 10
    finished: dict[str, Any] | None = None
    parked: dict[str, Any] | None = None
    rejected: dict[str, Any] | None = None
    proc: subprocess.Popen[bytes] | None = None
    _counter: int = 0
    _seq: int = 0

    # -- process ---------------------------------------------------------------------------

    def run(self) -> int:
        """Spawn the child, serve it until it closes the channel, return its exit code."""
        parent, child = socket.socketpair()
        out = (self.project.root.parent / "runner.stdout").open("wb")
        err = (self.project.root.parent / "runner.stderr").open("wb")
        try:
            env = child_env(self.project, {"PI_WORKFLOWS_RUNNER_FD": str(child.fileno())})
            env.update(self.extra_env)
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pi_workflows.runner"],
                pass_fds=(child.fileno(),),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            child.close()
            self._sock = parent
            self._reader = FrameReader(parent)
            self._send(
                RunnerCommand(
                    schema=RUNNER_SCHEMA, command=RunnerCommandKind.LAUNCH, payload=self.envelope
                )
            )
            self._serve()
            return self.proc.wait(timeout=READ_TIMEOUT)
        finally:
            out.close()
            err.close()
            parent.close()
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()

    @property
    def stderr(self) -> str:
        """What the child wrote to stderr."""
        return (self.project.root.parent / "runner.stderr").read_text(errors="replace")

    def kinds(self) -> list[str]:
        """The kinds of the messages received, in order."""
        return [m.kind for m in self.messages]

    def sent(self, kind: str) -> list[dict[str, Any]]:
        """The payloads of every message of ``kind``."""
        return [m.payload for m in self.messages if m.kind == kind]

    # -- serving ---------------------------------------------------------------------------

    def _send(self, message: object) -> None:
        self._sock.sendall(encode_frame(message))

    def _serve(self) -> None:
        while True:
            frame = self._reader.read_frame(timeout=READ_TIMEOUT)
            if frame is None:
                return
            message = decode_runner_message(frame)
            self._check(message)
            self.messages.append(message)
            hook = self.hooks.get(message.kind)
            answer = hook(self, message) if hook is not None else None
            if answer is None:
                answer = (Outcome.ACCEPTED, self._handle(message))
            outcome, payload = answer
            error = None if outcome.ok else ErrorInfo(code="scripted", message=outcome.value)
            self._send(
                RunnerReply(
                    schema=RUNNER_SCHEMA,
                    message_id=message.message_id,
                    outcome=outcome,
                    revision=self.revision,
                    payload=payload,
                    error=error,
                )
            )
            if message.kind == "ready" and outcome.ok:
                self._send(
                    RunnerCommand(schema=RUNNER_SCHEMA, command=RunnerCommandKind(self.command))
                )
            follow = self.after.get(message.kind)
            if follow is not None:
                follow(self, message)

    def _check(self, message: RunnerMessage) -> None:
        """Everything the server checks before it commits, as assertions."""
        assert (message.run_id, message.generation, message.runner_epoch) == (
            RUN_ID,
            GENERATION,
            RUNNER_EPOCH,
        )
        self._seq += 1
        assert message.message_id == f"{RUNNER_EPOCH}-{self._seq}"
        if message.kind in READS:
            assert message.expected_revision is None, message
        else:
            assert message.expected_revision == self.revision, message
        keys = set(message.payload)
        required = REQUIRED[message.kind]
        assert required <= keys, (message.kind, keys)
        assert keys <= required | OPTIONAL.get(message.kind, set()), (message.kind, keys)

    def _next_id(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}-{self._counter}"

    def _open_attempt(self, node_id: str) -> dict[str, Any]:
        visit = self.state["visits"].get(node_id, 0) + 1
        attempt = {
            "attemptId": self._next_id("att"),
            "nodeId": node_id,
            "visit": visit,
            "attemptNo": 1,
        }
        self.state["active"] = {**attempt, "status": "running", "request": None}
        self.state["currentNode"] = node_id
        return attempt

    def _handle(self, message: RunnerMessage) -> dict[str, Any]:
        payload = message.payload
        kind = message.kind
        if kind in READS:
            return {**self.state, "revision": self.revision} if kind == "state.get" else {}
        self.revision += 1
        if kind == "node.start":
            assert self.state["active"] is None
            return self._open_attempt(payload["nodeId"])
        if kind == "node.finish":
            return self._finish(payload)
        if kind == "node.wait":
            active = self.state["active"]
            assert active["attemptId"] == payload["attemptId"]
            active["status"] = "waiting"
            request_id = self._next_id("req")
            active["request"] = {
                "requestId": request_id,
                "kind": payload["kind"],
                "status": "pending",
                "answer": None,
            }
            return {"requestId": request_id}
        if kind == "run.park":
            self.parked = payload
            return {}
        if kind == "effect.reserve":
            return self._reserve(payload)
        if kind == "interaction.reject":
            self.rejected = payload
            return {}
        if kind in ("node.update", "node.logs", "process.register", "process.ended"):
            self.revision -= 1  # these change no run state here
        return {}

    def _finish(self, payload: dict[str, Any]) -> dict[str, Any]:
        active = self.state["active"]
        assert active is not None
        assert active["attemptId"] == payload["attemptId"]
        node_id = active["nodeId"]
        state = self.state
        state["visits"][node_id] = state["visits"].get(node_id, 0) + 1
        state["stepCount"] += 1
        if payload["outcome"] == "completed":
            state["outputs"][node_id] = payload["output"]
            state["results"][node_id] = {"outcome": "ok", "error": None}
        else:
            state["outputs"].pop(node_id, None)
            state["results"][node_id] = {"outcome": payload["outcome"], "error": payload["error"]}
        state["active"] = None
        following = payload["next"]
        if following["type"] == "finish":
            self.finished = following
            state["currentNode"] = None
            return {}
        state["currentNode"] = following["nodeId"]
        if payload.get("startNext"):
            return {"nextAttempt": self._open_attempt(following["nodeId"])}
        return {}

    def _reserve(self, payload: dict[str, Any]) -> dict[str, Any]:
        key = effect_key(
            RUN_ID, self.state.get("round", 0), payload["nodeId"], payload["visit"],
            payload["effectType"],
        )  # fmt: skip
        stored = self.stored_effects.get(payload["nodeId"])
        if stored is not None:
            return {"effectId": "eff-stored", "effectKey": key, **stored}
        effect_id = self._next_id("eff")
        return {"effectId": effect_id, "effectKey": key, "status": "applying"}
