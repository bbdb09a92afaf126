"""builtin:implement - from a task to a tested change: a plan you approve, edits, tests, fixes.

Input: ``{"task": str, "testCommand"?: str | [str], "maxFixRounds"?: int, "dir"?: str}``.
``plan`` asks the model for a typed plan (steps, files, risks) while it may only read;
``approve`` is a human decision (approve, change, stop): *change* asks the person what to
change (``change``, a checkpoint for the person: a text dialog in Pi, never a model turn)
and plans again with that text. ``implement``
edits with ``read``/``edit``/``write``/``grep``/``find``/``ls`` only (no shell). ``verify``
runs the project's test command (the input's, else ``make test``, ``npm test`` or ``pytest``
found in the project) under an idempotent effect: running tests twice is safe. A failure goes
to ``fix`` with the command's output, at most ``maxFixRounds`` times (default 3); then the
person decides (``exhausted``: more rounds, keep the change as it is, or stop). ``summary``
is the model's reply to the person; the run's output is ``report``. Nothing is committed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, Final

from pi_workflows import (
    NodeContext,
    Rejected,
    Workflow,
    agent,
    assistant_message,
    checkpoint,
    choice,
    compute,
    edge,
    human_decision,
    idempotent_effect,
    minutes,
    notify,
    shell,
    switch,
)

READ_TOOLS: Final = ["read", "grep", "find", "ls"]
"""Pi's tools that only look at the project: all the planning step may use."""
EDIT_TOOLS: Final = [*READ_TOOLS, "edit", "write"]
"""What editing needs; no ``bash``: the workflow runs the tests itself."""
DEFAULT_FIX_ROUNDS: Final = 3
MAX_FIX_ROUNDS: Final = 10
FAILURE_TAIL: Final = 12_000
"""Characters of the end of stdout and of stderr that a fix step is shown."""
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
_NPM_DEFAULT_TEST: Final = "no test specified"

INPUT: Final = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "minLength": 1, "description": "what to change, in words"},
        "testCommand": {
            "description": "the command that runs the tests: a list of arguments, or a string"
            " split like a shell would (no shell features); default: detected",
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "array", "items": {"type": "string"}, "minItems": 1},
            ],
        },
        "maxFixRounds": {"type": "integer", "minimum": 0, "maximum": MAX_FIX_ROUNDS},
        "dir": {"type": "string", "minLength": 1, "description": "default: the run's project"},
    },
    "required": ["task"],
    "additionalProperties": False,
}
PLAN: Final = {
    "type": "object",
    "title": "Plan",
    "properties": {
        "summary": {"type": "string", "minLength": 1, "description": "the change in a sentence"},
        "steps": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "minItems": 1,
            "description": "what to do, in order",
        },
        "files": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "description": "the files to create or change, relative to the project directory",
        },
        "risks": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "description": "what could go wrong (empty when nothing)",
        },
    },
    "required": ["summary", "steps", "files", "risks"],
    "additionalProperties": False,
}
CHANGE: Final = {
    "type": "object",
    "properties": {"change": {"type": "string", "minLength": 1}},
    "required": ["change"],
    "additionalProperties": False,
}
DONE: Final = {
    "type": "object",
    "title": "Implemented",
    "properties": {
        "summary": {"type": "string", "minLength": 1, "description": "what you changed"},
        "changedFiles": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "description": "the files you created or changed, relative to the project directory",
        },
    },
    "required": ["summary", "changedFiles"],
    "additionalProperties": False,
}


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _strings(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _tail(text: object) -> str:
    value = str(text or "")
    return value if len(value) <= FAILURE_TAIL else "[...]\n" + value[-FAILURE_TAIL:]


def detect_test_command(directory: Path) -> tuple[list[str], str] | None:
    """The project's test command and where it was found: a Makefile ``test`` target, an
    ``npm test`` script, or a pytest set-up (its ``.venv/bin/pytest`` when there is one)."""
    for name in ("GNUmakefile", "makefile", "Makefile"):
        makefile = directory / name
        if makefile.is_file():
            text = makefile.read_text(encoding="utf-8", errors="replace")
            if re.search(r"^test\s*:(?!=)", text, re.MULTILINE):
                return ["make", "test"], name
    package = directory / "package.json"
    if package.is_file():
        try:
            scripts = _object(json.loads(package.read_text(encoding="utf-8")).get("scripts"))
        except (ValueError, AttributeError):
            scripts = {}
        test = scripts.get("test")
        if isinstance(test, str) and test.strip() and _NPM_DEFAULT_TEST not in test:
            return ["npm", "test"], "package.json"
    markers = [
        (directory / "pytest.ini").is_file(),
        (directory / "conftest.py").is_file(),
        "[tool.pytest" in _read(directory / "pyproject.toml"),
        "[tool:pytest]" in _read(directory / "setup.cfg"),
        "[pytest]" in _read(directory / "tox.ini"),
        any(directory.glob("test_*.py")),
        any((directory / "tests").glob("test_*.py")),
        any((directory / "test").glob("test_*.py")),
    ]
    if any(markers):
        local = directory / ".venv" / "bin" / "pytest"
        return [str(local) if local.is_file() else "pytest"], "pytest"
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def setup(ctx: NodeContext) -> dict[str, Any]:
    """The project directory, the test command (given or detected) and the fix budget.

    Fails the run with one line when the directory or a test command is missing."""
    data = _object(ctx.input)
    directory = Path(str(data.get("dir") or os.getcwd())).expanduser().resolve()
    if not directory.is_dir():
        raise ValueError(f"the project directory {directory} does not exist")
    given = data.get("testCommand")
    if isinstance(given, str):
        command, source = shlex.split(given), "input"
    elif isinstance(given, list):
        command, source = [str(part) for part in given], "input"
    else:
        found = detect_test_command(directory)
        if found is None:
            raise ValueError(
                f"no test command found in {directory} (no Makefile test target, npm test"
                " script or pytest set-up): give one as the input's testCommand"
            )
        command, source = found
    if not command:
        raise ValueError("the input's testCommand is empty")
    program = command[0]
    local = (directory / program) if "/" in program else None
    if (local is None or not local.is_file()) and shutil.which(program) is None:
        raise ValueError(f"the test command's program {program!r} is not found on PATH")
    rounds = data.get("maxFixRounds")
    return {
        "dir": str(directory),
        "task": str(data.get("task", "")),
        "testCommand": list(command),
        "testCommandSource": source,
        "maxFixRounds": rounds if isinstance(rounds, int) else DEFAULT_FIX_ROUNDS,
    }


def _setup(ctx: NodeContext) -> dict[str, Any]:
    return _object(ctx.outputs["setup"])


def _command_text(ctx: NodeContext) -> str:
    return shlex.join(_strings(_setup(ctx)["testCommand"]))


def _plan_text(plan: dict[str, Any]) -> str:
    lines = [f"Plan: {plan.get('summary', '')}", "Steps:"]
    lines += [f"  {n}. {step}" for n, step in enumerate(_strings(plan.get("steps")), 1)]
    lines.append("Files: " + (", ".join(_strings(plan.get("files"))) or "(none named)"))
    risks = _strings(plan.get("risks"))
    lines.append("Risks: " + ("; ".join(risks) if risks else "none named"))
    return "\n".join(lines)


def plan_prompt(ctx: NodeContext) -> str:
    """The planning step: the task, where, how it will be tested, and the person's change."""
    found = _setup(ctx)
    lines = [
        f"Plan a change to the project in {found['dir']}.",
        "",
        f"Task: {found['task']}",
        "",
        "Look at the code with the read, grep, find and ls tools (change nothing yet), then"
        " submit a plan. A person approves it before anything is changed; then you implement"
        f" it, and the workflow runs the tests with `{_command_text(ctx)}`.",
    ]
    change = ctx.outputs.get("change")
    if "plan" in ctx.outputs and isinstance(change, dict):
        lines += [
            "",
            "Your previous plan:",
            _plan_text(_object(ctx.outputs["plan"])),
            "",
            f"The person asked for this change to it: {change.get('change', '')}",
            "Submit a revised plan.",
        ]
    return "\n".join(lines)


def check_plan(plan: dict[str, Any], ctx: NodeContext) -> None:
    """Every planned file is inside the project directory."""
    root = Path(str(_setup(ctx)["dir"]))
    outside = [
        name
        for name in _strings(plan.get("files"))
        if not (root / name).resolve().is_relative_to(root)
    ]
    if outside:
        raise Rejected(
            f"files must be inside the project directory {root}: {', '.join(outside)}; name"
            " them relative to it"
        )


def approve_title(ctx: NodeContext) -> str:
    """The decision's title: the plan's summary."""
    return f"Implement this plan? {_object(ctx.outputs['plan']).get('summary', '')}"


def approve_details(ctx: NodeContext) -> str:
    """The whole plan and what each choice does."""
    return (
        _plan_text(_object(ctx.outputs["plan"]))
        + f"\nTests: {_command_text(ctx)} in {_setup(ctx)['dir']}"
    )


def change_question(ctx: NodeContext) -> dict[str, Any]:
    """Ask the person what to change (a checkpoint for the person: the model never sees it)."""
    return {
        "question": "What should change in the plan?",
        "plan": str(_object(ctx.outputs["plan"]).get("summary", "")),
    }


def implement_prompt(ctx: NodeContext) -> str:
    """The approved plan, to carry out with the editing tools."""
    found = _setup(ctx)
    return "\n".join(
        [
            f"Implement the approved plan in the project in {found['dir']}.",
            "",
            f"Task: {found['task']}",
            _plan_text(_object(ctx.outputs["plan"])),
            "",
            "Use the read, grep, find, ls, edit and write tools. Do not run the tests: when"
            f" you submit, the workflow runs `{_command_text(ctx)}` and sends you any failure.",
        ]
    )


def judge(ctx: NodeContext) -> dict[str, Any]:
    """After a failed test run: the failure's round, and whether a fix round is left.

    ``allowed`` grows by ``maxFixRounds`` each time the person chooses more rounds."""
    found = _setup(ctx)
    granted = _object(ctx.outputs.get("grant")).get("allowed")
    allowed = int(granted) if isinstance(granted, int) else int(found["maxFixRounds"])
    result = ctx.results["verify"]
    details = _object(result.get("details"))
    failure = {
        "outcome": str(result.get("outcome")),
        "error": str(result.get("error") or ""),
        "exitCode": details.get("exitCode"),
        "stdout": _tail(details.get("stdout")),
        "stderr": _tail(details.get("stderr")),
    }
    return {
        "failures": ctx.visit,
        "allowed": allowed,
        "next": "fix" if ctx.visit <= allowed else "ask",
        "failure": failure,
    }


def _failure_text(failure: dict[str, Any]) -> str:
    if failure.get("outcome") == "timed_out":
        head = "The test command did not finish in time."
    else:
        head = f"The test command failed (exit code {failure.get('exitCode')})."
    parts = [head]
    if failure.get("stdout"):
        parts += ["Its output:", str(failure["stdout"])]
    if failure.get("stderr"):
        parts += ["Its error output:", str(failure["stderr"])]
    if not failure.get("stdout") and not failure.get("stderr"):
        parts.append(str(failure.get("error") or "It printed nothing."))
    return "\n".join(parts)


def fix_prompt(ctx: NodeContext) -> str:
    """The failure's output, for the next fix round."""
    verdict = _object(ctx.outputs["judge"])
    granted = _object(ctx.outputs.get("grant")).get("allowed", 0)
    allowed = max(int(verdict["allowed"]), int(granted))  # the person may just have granted more
    return "\n".join(
        [
            f"Fix round {verdict['failures']} of {allowed}: after your change the"
            f" tests fail. Command: `{_command_text(ctx)}` in {_setup(ctx)['dir']}.",
            "",
            _failure_text(_object(verdict.get("failure"))),
            "",
            f"Task: {_setup(ctx)['task']}",
            "Fix the code with the read, grep, find, ls, edit and write tools (do not run the"
            " tests; the workflow runs them again when you submit).",
        ]
    )


def exhausted_title(ctx: NodeContext) -> str:
    """The decision after the last fix round."""
    rounds = _object(ctx.outputs["judge"]).get("allowed")
    return f"The tests still fail after {rounds} fix rounds. What now?"


def exhausted_details(ctx: NodeContext) -> str:
    """The latest failure, for the person deciding."""
    failure = _object(_object(ctx.outputs["judge"]).get("failure"))
    return _failure_text({**failure, "stdout": str(failure.get("stdout", ""))[-2000:]})


def grant(ctx: NodeContext) -> dict[str, Any]:
    """More fix rounds, as many again as the input allows."""
    verdict = _object(ctx.outputs["judge"])
    return {"allowed": int(verdict["allowed"]) + max(1, int(_setup(ctx)["maxFixRounds"]))}


def _tests(ctx: NodeContext) -> str:
    return "passed" if "verify" in ctx.outputs else "failing"


def _changed_files(ctx: NodeContext) -> list[str]:
    files: list[str] = []
    for node in ("implement", "fix"):
        for name in _strings(_object(ctx.outputs.get(node)).get("changedFiles")):
            if name not in files:
                files.append(name)
    return files


def summary_prompt(ctx: NodeContext) -> str:
    """What happened, for the model to tell the person in a short reply."""
    found = _setup(ctx)
    rounds = ctx.outputs.get("judge")
    fixes = int(_object(rounds).get("failures", 0)) if rounds is not None else 0
    tests = _tests(ctx)
    result = (
        f"The tests passed (`{_command_text(ctx)}`) after {fixes} fix round(s)."
        if tests == "passed"
        else f"The tests still fail (`{_command_text(ctx)}`); the person kept the change."
    )
    return "\n".join(
        [
            "The implement workflow is done. Tell the person, in a few sentences, what was"
            " changed and how it was verified. Reply in plain text (no tool call).",
            "",
            f"Task: {found['task']}",
            _plan_text(_object(ctx.outputs["plan"])),
            "Changed files: " + (", ".join(_changed_files(ctx)) or "(none reported)"),
            result,
            f"The change is in {found['dir']}, not committed: review it (git diff) and commit"
            " it yourself.",
        ]
    )


def report(ctx: NodeContext) -> dict[str, Any]:
    """The run's output."""
    found = _setup(ctx)
    verdict = ctx.outputs.get("judge")
    return {
        "dir": found["dir"],
        "task": found["task"],
        "plan": ctx.outputs["plan"],
        "changedFiles": list(_changed_files(ctx)),
        "testCommand": found["testCommand"],
        "tests": _tests(ctx),
        "fixRounds": int(_object(verdict).get("failures", 0)) if verdict is not None else 0,
        "summary": ctx.outputs["summary"],
    }


def stopped_message(ctx: NodeContext) -> str:
    """The closing word when the person stops."""
    if "implement" in ctx.outputs:
        return (
            "Stopped with the tests failing; the changes are left in"
            f" {_setup(ctx)['dir']} for you to inspect (git diff)."
        )
    return "Stopped before anything was changed."


workflow = Workflow(
    "implement",
    start="setup",
    input=INPUT,
    max_steps=200,
    nodes={
        "setup": compute(setup),
        "plan": agent(
            plan_prompt, output=PLAN, validate=check_plan, allowed_tools=READ_TOOLS,
            timeout=minutes(30),
        ),
        "approve": human_decision(
            approve_title,
            [
                choice("approve", "Approve", "Implement the plan now"),
                choice("change", "Change", "Say what to change; the plan is made again"),
                choice("stop", "Stop", "End the run; nothing is changed"),
            ],
            details=approve_details,
        ),
        "change": checkpoint(change_question, answer=CHANGE, for_person=True),
        "implement": agent(
            implement_prompt, output=DONE, allowed_tools=EDIT_TOOLS, timeout=minutes(60)
        ),
        "verify": shell(
            lambda ctx: [
                sys.executable, "-c", _CHDIR_EXEC, _setup(ctx)["dir"],
                *_strings(_setup(ctx)["testCommand"]),
            ],
            effect=idempotent_effect("run-tests"),  # running the tests again is safe
            timeout=minutes(30),
        ),
        "judge": compute(judge),
        "fix": agent(fix_prompt, output=DONE, allowed_tools=EDIT_TOOLS, timeout=minutes(60)),
        "exhausted": human_decision(
            exhausted_title,
            [
                choice("more", "More rounds", "Let the model try again"),
                choice("keep", "Keep it", "Keep the change as it is, with failing tests"),
                choice("stop", "Stop", "End the run; the changes stay for you to inspect"),
            ],
            details=exhausted_details,
        ),
        "grant": compute(grant),
        "summary": agent(
            summary_prompt, expected_output=assistant_message(), allowed_tools=[],
            timeout=minutes(15),
        ),
        "report": compute(report),
        "stopped": notify(stopped_message, kind="final"),
    },
    edges=[
        edge("setup", "plan"),
        edge("plan", "approve"),
        switch(
            "approve", on="$.choice",
            cases={"approve": "implement", "change": "change", "stop": "stopped"},
        ),
        edge("change", "plan"),
        edge("implement", "verify"),
        switch(
            "verify", on="$result.outcome",
            cases={"ok": "summary", "failed": "judge", "timed_out": "judge"},
        ),
        switch("judge", on="$.next", cases={"fix": "fix", "ask": "exhausted"}),
        edge("fix", "verify"),
        switch(
            "exhausted", on="$.choice",
            cases={"more": "grant", "keep": "summary", "stop": "stopped"},
        ),
        edge("grant", "fix"),
        edge("summary", "report"),
    ],
)  # fmt: skip
