"""The review of one file: the child workflow `review-files.workflow.py` fans out.

A `Workflow` object in a sibling helper module, imported by the parent: it is recorded as a
mounted source of the parent, and each child run records its own source when it starts.
`read` takes the file's text (at most 64 KiB); `review` asks the model for a verdict.
"""

from pathlib import Path

from pi_workflows import NodeContext, Rejected, Workflow, agent, compute, edge, minutes

MAX_BYTES = 64 * 1024
VERDICTS = ("ok", "fix")


def read(ctx: NodeContext) -> dict[str, object]:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    path = Path(str(data.get("path", "")))
    text = path.read_text(encoding="utf-8", errors="replace")[:MAX_BYTES]
    return {"path": str(path), "text": text}


def prompt(ctx: NodeContext) -> str:
    found = ctx.outputs["read"]
    assert isinstance(found, dict)
    return (
        f"Review the file {found['path']} for bugs and unclear code. Its text:\n\n{found['text']}"
    )


def check(output: object, ctx: NodeContext) -> None:
    if not isinstance(output, dict) or output.get("verdict") not in VERDICTS:
        raise Rejected('submit {"verdict": "ok" or "fix", "issues": [...]}')
    if not isinstance(output.get("issues"), list):
        raise Rejected("issues must be a list of short strings (empty when there are none)")


review_file = Workflow(
    "review-file",
    start="read",
    nodes={
        "read": compute(read),
        "review": agent(
            prompt=prompt,
            expected_output='{"verdict": "ok" | "fix", "issues": ["<one line each>"]}',
            validate=check,
            timeout=minutes(20),
        ),
    },
    edges=[edge("read", "review")],
)
