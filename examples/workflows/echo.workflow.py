"""echo: an agent step that repeats the input text back, checked by `validate`.

Run with input {"text": "..."}. Shows an `agent` node with a JSON expected output, a
`validate` callback that sends the model back with `Rejected`, and a final `notify`.
"""

from pi_workflows import NodeContext, Rejected, Workflow, agent, edge, minutes, notify


def text_of(ctx: NodeContext) -> str:
    data = ctx.input if isinstance(ctx.input, dict) else {}
    text = data.get("text")
    return text if isinstance(text, str) and text else "hello, workflow"


def check_echo(output: object, ctx: NodeContext) -> None:
    if not isinstance(output, dict) or output.get("echo") != text_of(ctx):
        raise Rejected(f'submit {{"echo": "{text_of(ctx)}"}}, exactly that text')


workflow = Workflow(
    "echo",
    start="repeat",
    nodes={
        "repeat": agent(
            prompt=lambda ctx: f"Repeat this text back exactly: {text_of(ctx)}",
            expected_output='{"echo": "<the text, unchanged>"}',
            validate=check_echo,
            timeout=minutes(5),
        ),
        "done": notify(lambda ctx: f"Echoed: {ctx.outputs['repeat']}", kind="final"),
    },
    edges=[edge("repeat", "done")],
)
