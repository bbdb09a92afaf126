"""feedback: a checkpoint that asks one question and validates the answer.

The answer may come from the person or the model (an ordinary checkpoint). `validate`
refuses an empty answer with a message, and the request stays open for a better one.
"""

from pi_workflows import NodeContext, Rejected, Workflow, checkpoint, compute, edge, minutes


def needs_text(answer: object, ctx: NodeContext) -> None:
    text = answer.get("text") if isinstance(answer, dict) else answer
    if not isinstance(text, str) or not text.strip():
        raise Rejected("please answer with some text")


def thank(ctx: NodeContext) -> dict[str, object]:
    answer = ctx.outputs["ask"]
    text = answer.get("text") if isinstance(answer, dict) else answer
    return {"feedback": text, "words": len(str(text).split())}


workflow = Workflow(
    "feedback",
    start="ask",
    nodes={
        "ask": checkpoint(
            {"question": "How did the last release go?", "hint": "one or two sentences"},
            validate=needs_text,
            timeout=minutes(60),
        ),
        "record": compute(thank),
    },
    edges=[edge("ask", "record")],
)
