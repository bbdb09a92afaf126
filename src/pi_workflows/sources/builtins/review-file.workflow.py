"""builtin:review-file - review one file's change against a git base (builtin:review runs it).

Input: ``{"file": str, "base"?: str, "dir"?: str}``. ``diff`` reads ``git diff BASE -- FILE``
(a read: idempotent); ``review`` asks the model, which may only read, for typed findings
``{"findings": [{"file", "line", "severity", "text"}]}`` about that file; the findings are
the run's output. ``builtin:review`` starts one of these per changed file, each on its own
headless Pi.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Final

from pi_workflows import (
    NodeContext,
    Rejected,
    Workflow,
    agent,
    compute,
    edge,
    idempotent_effect,
    minutes,
    shell,
)

READ_TOOLS: Final = ["read", "grep", "find", "ls"]
SEVERITIES: Final = ["error", "warning", "note"]
DIFF_CHARS: Final = 60_000
"""Characters of the file's diff the model is shown; a longer diff is cut, with a note."""
BASE_PATTERN: Final = re.compile(r"\A[A-Za-z0-9_./~^@{}][A-Za-z0-9_./~^@{}+-]*\Z")
"""A git revision a base may be (no options, no spaces)."""

INPUT: Final = {
    "type": "object",
    "properties": {
        "file": {"type": "string", "minLength": 1, "description": "relative to the directory"},
        "base": {"type": "string", "minLength": 1, "description": "default HEAD"},
        "dir": {"type": "string", "minLength": 1, "description": "default: the run's project"},
        "status": {"type": "string"},
    },
    "required": ["file"],
    "additionalProperties": False,
}
FINDINGS: Final = {
    "type": "object",
    "title": "Findings",
    "properties": {
        "findings": {
            "type": "array",
            "description": "one entry per problem (empty when the change looks right)",
            "items": {
                "type": "object",
                "properties": {
                    "file": {"type": "string", "description": "the reviewed file, as given"},
                    "line": {
                        "type": ["integer", "null"],
                        "minimum": 1,
                        "description": "the line in the new version of the file (null: the"
                        " whole file)",
                    },
                    "severity": {"enum": SEVERITIES},
                    "text": {"type": "string", "minLength": 1, "description": "the problem"},
                },
                "required": ["file", "line", "severity", "text"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["findings"],
    "additionalProperties": False,
}


def target(ctx: NodeContext) -> dict[str, Any]:
    """The file, base and directory, checked (the base is never an option to git)."""
    data = ctx.input if isinstance(ctx.input, dict) else {}
    directory = Path(str(data.get("dir") or os.getcwd())).expanduser().resolve()
    base = str(data.get("base") or "HEAD")
    if not BASE_PATTERN.match(base):
        raise ValueError(f"the base {base!r} is not a git revision name")
    file = str(data.get("file", ""))
    if not (directory / file).resolve().is_relative_to(directory):
        raise ValueError(f"the file {file!r} is outside {directory}")
    return {"dir": str(directory), "base": base, "file": file}


def _target(ctx: NodeContext) -> dict[str, Any]:
    found = ctx.outputs["target"]
    return found if isinstance(found, dict) else {}


def diff_command(ctx: NodeContext) -> list[str]:
    """``git diff BASE -- FILE`` in the directory."""
    found = _target(ctx)
    return [
        "git", "-C", str(found["dir"]), "diff", "--no-color", "--no-ext-diff", "--unified=5",
        str(found["base"]), "--", str(found["file"]),
    ]  # fmt: skip


def review_prompt(ctx: NodeContext) -> str:
    """The file's diff, and what to report."""
    found = _target(ctx)
    result = ctx.outputs["diff"]
    diff = str(result.get("stdout", "")) if isinstance(result, dict) else ""
    if len(diff) > DIFF_CHARS:
        diff = diff[:DIFF_CHARS] + f"\n[... the diff is cut at {DIFF_CHARS} characters]"
    return "\n".join(
        [
            f"Review the change to the file {found['file']} (against {found['base']}) in the"
            f" project in {found['dir']}. Look for bugs, unclear code and missing tests; you"
            " may read the project with the read, grep, find and ls tools.",
            f'Report each problem with "file": "{found["file"]}", the line in the new version'
            ' of the file (null for the file as a whole), a severity ("error": wrong or'
            ' broken; "warning": likely a problem; "note": worth a look) and the text. Submit'
            " an empty list when the change looks right.",
            "",
            diff or "(the diff is empty)",
        ]
    )


def check_findings(output: dict[str, Any], ctx: NodeContext) -> None:
    """Findings are about the reviewed file only."""
    file = str(_target(ctx)["file"])
    others = sorted({str(f.get("file")) for f in output["findings"] if f.get("file") != file})
    if others:
        raise Rejected(
            f'report findings of {file} only, each with "file": "{file}" (got {", ".join(others)})'
        )


workflow = Workflow(
    "review-file",
    start="target",
    input=INPUT,
    nodes={
        "target": compute(target),
        "diff": shell(
            diff_command, effect=idempotent_effect("git-read"), timeout=minutes(2)
        ),  # reading a diff is safe to repeat
        "review": agent(
            review_prompt, output=FINDINGS, validate=check_findings, allowed_tools=READ_TOOLS,
            timeout=minutes(20),
        ),
    },
    edges=[edge("target", "diff"), edge("diff", "review")],
)  # fmt: skip
