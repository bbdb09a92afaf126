"""list-files: a shell pipeline with parsing.

Lists a directory with `ls`, parses the listing in a compute node, and reports the counts.
A failing command (a missing directory) is routed through `$result.outcome` to a message
instead of failing the run. Input: {"dir": "some/path"} (default ".").
"""

from pi_workflows import (
    ActionContext,
    NodeContext,
    Workflow,
    compute,
    edge,
    idempotent_effect,
    notify,
    seconds,
    shell,
    switch,
)


def list_command(ctx: ActionContext) -> list[str]:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    directory = data.get("dir")
    return ["ls", "-1", "-p", directory if isinstance(directory, str) else "."]


def parse_listing(ctx: NodeContext) -> dict[str, object]:
    result = ctx.outputs["list"]
    assert isinstance(result, dict)
    stdout = result["stdout"]
    assert isinstance(stdout, str)
    entries = [line for line in stdout.splitlines() if line]
    directories = sorted(e.rstrip("/") for e in entries if e.endswith("/"))
    files = sorted(e for e in entries if not e.endswith("/"))
    suffixes: dict[str, int] = {}
    for name in files:
        suffix = name.rsplit(".", 1)[1] if "." in name.lstrip(".") else ""
        suffixes[suffix] = suffixes.get(suffix, 0) + 1
    return {"files": files, "directories": directories, "bySuffix": suffixes}


def summary(ctx: NodeContext) -> str:
    parsed = ctx.outputs["parse"]
    assert isinstance(parsed, dict)
    return f"{len(parsed['files'])} files and {len(parsed['directories'])} directories"


workflow = Workflow(
    "list-files",
    start="list",
    nodes={
        # Reading a directory changes nothing, so a retry is always safe.
        "list": shell(
            list_command, effect=idempotent_effect("list-directory"), timeout=seconds(30)
        ),
        "parse": compute(parse_listing),
        "report": notify(summary, kind="final"),
        "explain": notify(
            lambda ctx: f"Could not list the directory: {ctx.results['list']['error']}",
            kind="final",
        ),
    },
    edges=[
        switch("list", on="$result.outcome", cases={"ok": "parse", "failed": "explain"}),
        edge("parse", "report"),
    ],
)
