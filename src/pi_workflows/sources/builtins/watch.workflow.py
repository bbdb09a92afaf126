"""builtin:watch - run a command every interval and tell the session when its result changes.

Input: ``{"command": str | [str], "everySeconds"?: number, "until"?: {"exitCode"?: int,
"outputContains"?: str}, "maxChecks"?: int, "forMinutes"?: number, "dir"?: str}``. ``check``
runs the command (a check, safe to repeat: idempotent) and is tried again on a transient
failure (it could not start, was killed, or ran over five minutes: exit code 126 or more);
``judge`` compares its exit code and output with the previous check's; the first result and
every change become a message to the session (``started``, ``changed``); ``pause`` sleeps
durably (no process waits) until the next check. It stops when ``until`` holds, after
``maxChecks`` checks (default 100) or at the deadline (``forMinutes``, default a day), with
a final message (after the change's message when that check changed); the run's output is
``report``.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from pi_workflows import (
    NodeContext,
    Workflow,
    compute,
    edge,
    idempotent_effect,
    minutes,
    notify,
    retry,
    seconds,
    shell,
    sleep,
    switch,
)

DEFAULT_EVERY: Final = 60.0
DEFAULT_CHECKS: Final = 100
MAX_CHECKS: Final = 1000
DEFAULT_MINUTES: Final = 24 * 60.0
MAX_MINUTES: Final = 30 * 24 * 60.0
SHOWN_CHARS: Final = 2000
"""Characters of the command's output a message shows (the comparison uses all of it)."""
FAILING_EXIT: Final = 126
"""Exit codes from here on (cannot execute, not found, killed by a signal) are failures."""
_CHDIR_EXEC: Final = (
    "import os, sys\n"
    "try:\n"
    "    os.chdir(sys.argv[1])\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as error:\n"
    "    sys.stderr.write(f'{sys.argv[2]}: {error.strerror}\\n')\n"
    "    os._exit(127 if isinstance(error, FileNotFoundError) else 126)\n"
)
"""Runs a command in a directory (argv: DIR COMMAND ARGS...); 127 when it is not found and
126 when it cannot run, as a shell would."""

INPUT: Final = {
    "type": "object",
    "properties": {
        "command": {
            "description": "a list of arguments, or a string split like a shell would (no"
            ' shell features; for pipes use ["sh", "-c", "..."])',
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ],
        },
        "everySeconds": {"type": "number", "minimum": 1, "maximum": 86400},
        "until": {
            "type": "object",
            "properties": {"exitCode": {"type": "integer"}, "outputContains": {"type": "string"}},
            "minProperties": 1,
            "additionalProperties": False,
        },
        "maxChecks": {"type": "integer", "minimum": 1, "maximum": MAX_CHECKS},
        "forMinutes": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_MINUTES},
        "dir": {"type": "string", "minLength": 1, "description": "default: the run's project"},
    },
    "required": ["command"],
    "additionalProperties": False,
}


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def setup(ctx: NodeContext) -> dict[str, Any]:
    """The command, the schedule and the stop rules, with defaults; the deadline is set now."""
    data = _object(ctx.input)
    given = data["command"]
    command = shlex.split(given) if isinstance(given, str) else [str(part) for part in given]
    if not command:
        raise ValueError("the command is empty")
    directory = Path(str(data.get("dir") or os.getcwd())).expanduser().resolve()
    if not directory.is_dir():
        raise ValueError(f"the directory {directory} does not exist")
    span = float(data.get("forMinutes", DEFAULT_MINUTES))
    return {
        "command": command,
        "dir": str(directory),
        "everySeconds": float(data.get("everySeconds", DEFAULT_EVERY)),
        "until": _object(data.get("until")),
        "maxChecks": int(data.get("maxChecks", DEFAULT_CHECKS)),
        "deadline": (datetime.now(UTC) + timedelta(minutes=span)).isoformat(),
    }


def _setup(ctx: NodeContext) -> dict[str, Any]:
    return _object(ctx.outputs["setup"])


def check_command(ctx: NodeContext) -> list[str]:
    """The command, run in the directory."""
    found = _setup(ctx)
    return [sys.executable, "-c", _CHDIR_EXEC, str(found["dir"]), *found["command"]]


def _shown(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + " [...]"


def judge(ctx: NodeContext) -> dict[str, Any]:
    """This check against the previous one, and whether to stop (and why)."""
    found = _setup(ctx)
    result = _object(ctx.outputs["check"])
    output = str(result.get("stdout", "")).rstrip()
    exit_code = int(result.get("exitCode", 0))
    digest = hashlib.sha256(f"{exit_code}\n{output}".encode()).hexdigest()
    previous = ctx.outputs.get("judge")
    before = _object(previous)
    changed = previous is not None and before.get("digest") != digest
    until = _object(found["until"])
    conditions = []
    if "exitCode" in until:
        conditions.append(exit_code == until["exitCode"])
    if "outputContains" in until:
        conditions.append(str(until["outputContains"]) in output)
    now = datetime.now(UTC)
    stop = None
    if conditions and all(conditions):
        stop = "condition"
    elif ctx.visit >= int(found["maxChecks"]):
        stop = "count"
    elif now >= datetime.fromisoformat(str(found["deadline"])):
        stop = "deadline"
    route = "first" if previous is None else "changed" if changed else "stop" if stop else "same"
    return {
        "check": ctx.visit,
        "exitCode": exit_code,
        "output": _shown(output),
        "digest": digest,
        "changed": changed,
        "changes": int(before.get("changes", 0)) + (1 if changed else 0),
        "previousExitCode": before.get("exitCode"),
        "previousOutput": before.get("output"),
        "stop": stop,
        "route": route,
    }


def go_on(ctx: NodeContext) -> dict[str, Any]:
    """After a message: stop now (this check met a stop rule) or sleep until the next."""
    return {"stop": _object(ctx.outputs["judge"]).get("stop") is not None}


def _name(ctx: NodeContext) -> str:
    return shlex.join(_setup(ctx)["command"])


def started(ctx: NodeContext) -> str:
    """The first result."""
    seen = _object(ctx.outputs["judge"])
    every = float(_setup(ctx)["everySeconds"])
    return (
        f"Watching `{_name(ctx)}` every {every:g} s: exit code {seen['exitCode']}, output:"
        f"\n{seen['output']}"
    )


def changed(ctx: NodeContext) -> str:
    """What changed since the previous check."""
    seen = _object(ctx.outputs["judge"])
    lines = [f"`{_name(ctx)}` changed (check {seen['check']}):"]
    if seen["exitCode"] != seen["previousExitCode"]:
        lines.append(f"exit code {seen['previousExitCode']} -> {seen['exitCode']}")
    if seen["output"] != seen["previousOutput"]:
        lines += ["output now:", str(seen["output"])]
    return "\n".join(lines)


def until_next(ctx: NodeContext) -> float:
    """Seconds to the next check: the interval, or less when the deadline comes first."""
    found = _setup(ctx)
    left = (datetime.fromisoformat(str(found["deadline"])) - datetime.now(UTC)).total_seconds()
    return max(0.0, min(float(found["everySeconds"]), left))


_WHY: Final = {
    "condition": "the stop condition holds",
    "count": "the last of {n} checks",
    "deadline": "the deadline passed",
}


def finished(ctx: NodeContext) -> str:
    """The closing word: why it stopped, and the last result."""
    seen = _object(ctx.outputs["judge"])
    why = _WHY[str(seen["stop"])].format(n=seen["check"])
    return (
        f"Stopped watching `{_name(ctx)}` after {seen['check']} check(s): {why}. Last result:"
        f" exit code {seen['exitCode']}, output:\n{seen['output']}"
    )


def report(ctx: NodeContext) -> dict[str, Any]:
    """The run's output."""
    seen = _object(ctx.outputs["judge"])
    return {
        "command": _setup(ctx)["command"],
        "checks": seen["check"],
        "changes": seen["changes"],
        "stoppedBecause": seen["stop"],
        "exitCode": seen["exitCode"],
        "output": seen["output"],
    }


workflow = Workflow(
    "watch",
    start="setup",
    input=INPUT,
    max_steps=5 * MAX_CHECKS + 10,  # at most check, judge, a message, go_on and a sleep each
    nodes={
        "setup": compute(setup),
        "check": shell(
            check_command,
            effect=idempotent_effect("watch-check"),  # a check: running it again is safe
            allow_exit_codes=range(FAILING_EXIT),
            timeout=minutes(5),
            retry=retry(attempts=3, delay=seconds(5), backoff=2.0, max_delay=minutes(1)),
        ),
        "judge": compute(judge),
        "started": notify(started),
        "changed": notify(changed),
        "go_on": compute(go_on),
        "pause": sleep(until=until_next),
        "finished": notify(finished, kind="final"),
        "report": compute(report),
    },
    edges=[
        edge("setup", "check"),
        edge("check", "judge"),
        switch(
            "judge", on="$.route",
            cases={"first": "started", "changed": "changed", "same": "pause", "stop": "finished"},
        ),
        edge("started", "go_on"),
        edge("changed", "go_on"),
        switch("go_on", on="$.stop", cases={True: "finished", False: "pause"}),
        edge("pause", "check"),
        edge("finished", "report"),
    ],
)  # fmt: skip
