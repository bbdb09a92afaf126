"""builtin:review - review the current change, one sub-agent per changed file, in parallel.

Input: ``{"base"?: str, "dir"?: str, "maxFiles"?: int}``. ``changed`` lists the files
``git diff BASE`` changes (default base ``HEAD``: your uncommitted work; a read, so
idempotent). ``reviews`` fans out one ``builtin:review-file`` child per changed file (deleted
files are skipped), four at a time, each detached: on its own headless Pi, so the reviews
run side by side; each returns typed findings (file, line, severity, text). ``merge`` sorts
them into one report, ``tell`` sends it to the session as one message, and ``present`` is
the model's reply about it. A review that fails is named in the report; the others count.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Final

from pi_workflows import (
    NodeContext,
    Workflow,
    agent,
    assistant_message,
    compute,
    edge,
    fan_out,
    idempotent_effect,
    minutes,
    notify,
    shell,
    switch,
)

SEVERITIES: Final = ["error", "warning", "note"]
DEFAULT_MAX_FILES: Final = 20
MAX_FILES: Final = 100
CONCURRENCY: Final = 4
BASE_PATTERN: Final = re.compile(r"\A[A-Za-z0-9_./~^@{}][A-Za-z0-9_./~^@{}+-]*\Z")
"""A git revision a base may be (no options, no spaces)."""

INPUT: Final = {
    "type": "object",
    "properties": {
        "base": {"type": "string", "minLength": 1, "description": "default HEAD"},
        "dir": {"type": "string", "minLength": 1, "description": "default: the run's project"},
        "maxFiles": {"type": "integer", "minimum": 1, "maximum": MAX_FILES},
    },
    "additionalProperties": False,
}


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def setup(ctx: NodeContext) -> dict[str, Any]:
    """The directory and base, checked (the base is never an option to git)."""
    data = _object(ctx.input)
    directory = Path(str(data.get("dir") or os.getcwd())).expanduser().resolve()
    if not directory.is_dir():
        raise ValueError(f"the directory {directory} does not exist")
    if not any((folder / ".git").exists() for folder in (directory, *directory.parents)):
        raise ValueError(
            f"{directory} is not in a git work tree: review compares it with a git base"
        )
    base = str(data.get("base") or "HEAD")
    if not BASE_PATTERN.match(base):
        raise ValueError(f"the base {base!r} is not a git revision name")
    limit = data.get("maxFiles")
    return {
        "dir": str(directory),
        "base": base,
        "maxFiles": limit if isinstance(limit, int) else DEFAULT_MAX_FILES,
    }


def _setup(ctx: NodeContext) -> dict[str, Any]:
    return _object(ctx.outputs["setup"])


def changed_command(ctx: NodeContext) -> list[str]:
    """``git diff --name-status BASE``, NUL-separated."""
    found = _setup(ctx)
    return [
        "git", "-C", str(found["dir"]), "diff", "--name-status", "--no-renames", "-z",
        str(found["base"]), "--",
    ]  # fmt: skip


def files(ctx: NodeContext) -> dict[str, Any]:
    """The changed files to review, in path order: at most ``maxFiles``; deleted ones and
    the rest are listed, not reviewed."""
    found = _setup(ctx)
    fields = str(_object(ctx.outputs["changed"]).get("stdout", "")).split("\0")
    changes = sorted(
        (fields[i + 1], fields[i]) for i in range(0, len(fields) - 1, 2) if fields[i + 1]
    )
    deleted = [path for path, status in changes if status.startswith("D")]
    kept = [{"file": path, "status": status} for path, status in changes if path not in deleted]
    limit = int(found["maxFiles"])
    return {
        "items": kept[:limit],
        "skipped": [item["file"] for item in kept[limit:]],
        "deleted": deleted,
        "empty": not kept,
    }


def _items(ctx: NodeContext) -> list[Any]:
    items = _object(ctx.outputs["files"]).get("items")
    return items if isinstance(items, list) else []


def child_input(ctx: NodeContext, item: Any) -> dict[str, Any]:
    """One child's input: its file, the base and the directory."""
    found = _setup(ctx)
    return {"file": item["file"], "status": item["status"], "base": found["base"],
            "dir": found["dir"]}  # fmt: skip


def git_failed(ctx: NodeContext) -> dict[str, Any]:
    """End the run with git's own words (not a git work tree, an unknown base, ...)."""
    result = ctx.results["changed"]
    lines = str(_object(result.get("details")).get("stderr", "")).strip().splitlines()
    said = [line for line in lines if line.startswith(("fatal:", "error:"))] or lines
    why = said[0] if said else str(result.get("error") or "no output")
    found = _setup(ctx)
    raise RuntimeError(f"git diff against {found['base']} failed in {found['dir']}: {why}")


def merge(ctx: NodeContext) -> dict[str, Any]:
    """Every child's findings in one list (by severity, file, line), counted, with the
    files whose review failed."""
    children = ctx.outputs.get("reviews")
    if not isinstance(children, list):  # some child failed: the list is in the details
        children = _object(ctx.results["reviews"].get("details")).get("children") or []
    items = _items(ctx)
    findings: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    for item, child in zip(items, children, strict=False):
        if not isinstance(child, dict):
            continue
        if child.get("outcome") != "ok":
            failed.append({"file": item["file"], "runId": child.get("runId"),
                           "error": child.get("error") or child.get("outcome")})  # fmt: skip
            continue
        findings += [f for f in _object(child.get("output")).get("findings", []) if f]
    order = {severity: n for n, severity in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (order.get(f["severity"], 9), f["file"], f["line"] or 0))
    counts = {severity: sum(1 for f in findings if f["severity"] == severity)
              for severity in SEVERITIES}  # fmt: skip
    listing = _object(ctx.outputs["files"])
    return {
        "base": _setup(ctx)["base"],
        "dir": _setup(ctx)["dir"],
        "reviewed": [item["file"] for item in items],
        "findings": findings,
        "counts": counts,
        "failed": failed,
        "skipped": listing.get("skipped", []),
        "deleted": listing.get("deleted", []),
    }


def message(ctx: NodeContext) -> str:
    """The merged review as one message."""
    merged = _object(ctx.outputs["merge"])
    counts = _object(merged["counts"])
    reviewed = merged["reviewed"]
    lines = [
        f"Review of {len(reviewed)} changed file(s) against {merged['base']}: "
        + ", ".join(f"{counts[s]} {s}(s)" for s in SEVERITIES)
    ]
    for finding in merged["findings"]:
        where = f"{finding['file']}:{finding['line']}" if finding["line"] else finding["file"]
        lines.append(f"- [{finding['severity']}] {where}: {finding['text']}")
    if not merged["findings"]:
        lines.append("No findings.")
    for failure in merged["failed"]:
        lines.append(f"- review of {failure['file']} failed: {failure['error']}")
    if merged["skipped"]:
        lines.append(f"Not reviewed (over maxFiles): {', '.join(merged['skipped'])}")
    if merged["deleted"]:
        lines.append(f"Deleted, not reviewed: {', '.join(merged['deleted'])}")
    return "\n".join(lines)


def present_prompt(ctx: NodeContext) -> str:
    """Ask the model to present the review to the person."""
    return (
        "The review workflow finished. Present its result to the person in a short reply"
        " (plain text, no tool call): the most important findings first, then what to do."
        "\n\n" + str(_object(ctx.outputs["tell"]).get("message", ""))
    )


def report(ctx: NodeContext) -> dict[str, Any]:
    """The run's output: the merged review and the model's presentation of it."""
    return {**_object(ctx.outputs["merge"]), "presentation": ctx.outputs["present"]}


workflow = Workflow(
    "review",
    start="setup",
    input=INPUT,
    nodes={
        "setup": compute(setup),
        "changed": shell(
            changed_command, effect=idempotent_effect("git-read"), timeout=minutes(2)
        ),  # listing a diff is safe to repeat
        "git_failed": compute(git_failed),
        "files": compute(files),
        "nothing": notify(
            lambda ctx: f"No changed files to review against {_setup(ctx)['base']}.",
            kind="final",
        ),
        "reviews": fan_out(
            "builtin:review-file", items=_items, input=child_input, concurrency=CONCURRENCY,
            detached=True,
        ),
        "merge": compute(merge),
        "tell": notify(message),
        "present": agent(
            present_prompt, expected_output=assistant_message(), allowed_tools=[],
            timeout=minutes(15),
        ),
        "report": compute(report),
    },
    edges=[
        edge("setup", "changed"),
        switch(
            "changed", on="$result.outcome",
            cases={"ok": "files", "failed": "git_failed", "timed_out": "git_failed"},
        ),
        switch("files", on="$.empty", cases={True: "nothing", False: "reviews"}),
        switch("reviews", on="$result.outcome", cases={"ok": "merge", "failed": "merge"}),
        edge("merge", "tell"),
        edge("tell", "present"),
        edge("present", "report"),
    ],
)  # fmt: skip
