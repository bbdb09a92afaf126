"""review-files: sub-agents review files side by side, then one summary.

Run with input {"files": ["a.py", ...]} or {"dir": "src"} (its Python files, at most 50).
`review` fans out one child run of `review-file` (a `Workflow` object from the helper module
`review_file.py`) per file, three at a time, each detached: on its own headless Pi, so the
reviews really run in parallel. Its output lists every child's `{runId, outcome, output,
error}` in file order; `summary` reads them (in the session that started the run). When a
review fails, `$result.outcome` routes to `report`, which names the failed children
(`run show` of the run lists them too).
"""

from pathlib import Path

from review_file import review_file

from pi_workflows import NodeContext, Workflow, agent, compute, fan_out, minutes, switch

MAX_FILES = 50


def files(ctx: NodeContext) -> list[str]:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    given = data.get("files")
    if isinstance(given, list):
        return [str(path) for path in given][:MAX_FILES]
    root = Path(str(data.get("dir", ".")))
    return sorted(str(path) for path in root.rglob("*.py"))[:MAX_FILES]


def summary_prompt(ctx: NodeContext) -> str:
    reviews = ctx.outputs["review"]
    assert isinstance(reviews, list)
    lines = [f"- {child['output']}" for child in reviews if isinstance(child, dict)]
    return "Summarize these file reviews in a few sentences:\n" + "\n".join(lines)


def failed_reviews(ctx: NodeContext) -> dict[str, object]:
    details = ctx.results["review"].get("details")
    children = details.get("children", []) if isinstance(details, dict) else []
    failed = [c for c in children if isinstance(c, dict) and c.get("outcome") != "ok"]
    return {"error": ctx.results["review"]["error"], "failed": failed}


workflow = Workflow(
    "review-files",
    start="review",
    nodes={
        "review": fan_out(
            review_file,
            items=files,
            input=lambda ctx, path: {"path": path},
            concurrency=3,
            detached=True,
        ),
        "summary": agent(
            prompt=summary_prompt,
            expected_output='{"summary": "<a few sentences>"}',
            timeout=minutes(10),
        ),
        "report": compute(failed_reviews),
    },
    edges=[
        switch("review", on="$result.outcome", cases={"ok": "summary", "failed": "report"}),
    ],
)
