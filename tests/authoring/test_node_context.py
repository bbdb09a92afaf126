"""The typed node context, the cancellation signal, callback invocation and JSON checks."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from enum import StrEnum

import pytest

from pi_workflows.authoring import (
    ActionContext,
    CancellationSignal,
    JsonValue,
    NodeCancelledError,
    NodeContext,
    evaluate,
    invoke,
    json_problem,
)


def _context(**changes: object) -> ActionContext:
    fields: dict[str, object] = {
        "workflow": "w",
        "run_id": "run-1",
        "node_id": "n",
        "attempt_id": "att-1",
        "visit": 2,
        "input": {"x": 1},
        "outputs": {"prev": [1, 2]},
        "results": {"prev": {"outcome": "ok", "error": None}},
        "cancellation": CancellationSignal(),
        "effect_key": "pwf-key",
    }
    fields.update(changes)
    return ActionContext(**fields)  # type: ignore[arg-type]


def test_context_exposes_the_documented_fields() -> None:
    """``ctx`` carries input, outputs, results, ids, the visit and cancellation."""
    ctx = _context()
    assert isinstance(ctx, NodeContext)
    assert ctx.input == {"x": 1}
    assert ctx.outputs["prev"] == [1, 2]
    assert ctx.results["prev"]["outcome"] == "ok"
    assert (ctx.run_id, ctx.node_id, ctx.attempt_id, ctx.visit) == ("run-1", "n", "att-1", 2)
    assert ctx.effect_key == "pwf-key"
    assert not ctx.cancellation.is_set()


def test_publish_update_defaults_to_discarding() -> None:
    """A context built without a runner accepts and drops updates."""
    _context().publish_update({"progress": 1})


def test_publish_update_reaches_the_runner_callback() -> None:
    """The runner's ``publish_update`` receives each update."""
    seen: list[JsonValue] = []
    ctx = _context(publish_update=seen.append)
    ctx.publish_update({"step": 1})
    assert seen == [{"step": 1}]


def test_cancellation_set_from_another_thread_is_seen() -> None:
    """The signal is thread-safe: a set in another thread wakes a waiting callback."""
    signal = CancellationSignal()
    setter = threading.Thread(target=signal.set)
    setter.start()
    setter.join()
    assert signal.wait(timeout=5)
    assert signal.is_set()
    with pytest.raises(NodeCancelledError):
        signal.raise_if_set()


def test_unset_cancellation_does_not_raise() -> None:
    """``raise_if_set`` is silent until cancellation is requested."""
    signal = CancellationSignal()
    signal.raise_if_set()
    assert signal.wait(timeout=0) is False


def test_evaluate_calls_sync_and_async_callbacks_and_passes_values_through() -> None:
    """Sync and async callbacks are called with ctx; plain values come back unchanged."""
    ctx = _context()

    async def later(c: NodeContext) -> str:
        await asyncio.sleep(0)
        return f"async {c.node_id}"

    assert asyncio.run(evaluate(lambda c: f"sync {c.node_id}", ctx)) == "sync n"
    assert asyncio.run(evaluate(later, ctx)) == "async n"
    assert asyncio.run(evaluate("plain", ctx)) == "plain"
    assert asyncio.run(evaluate({"question": "q"}, ctx)) == {"question": "q"}


def test_invoke_passes_every_argument() -> None:
    """``invoke`` calls validate-style callbacks with the output and ctx."""
    ctx = _context()
    assert asyncio.run(invoke(lambda output, c: (output, c.visit), {"a": 1}, ctx)) == (
        {"a": 1},
        2,
    )


class _Color(StrEnum):
    RED = "red"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"a": (1, 2)}, "$.a is a tuple (use a list), not a JSON value"),
        ({"a": {1}}, "$.a is a set, not a JSON value"),
        ({"a": [1, float("nan")]}, "$.a[1] is nan, which JSON cannot represent"),
        ({1: "x"}, "$ has the key 1 of type int; keys must be str"),
        (_Color.RED, "test_node_context._Color, not a JSON value"),
        (OrderedDict(a=1), "$ is a collections.OrderedDict, not a JSON value"),
        (b"bytes", "$ is a bytes, not a JSON value"),
        ("\ud800", "$ is a string with a lone surrogate"),
    ],
)
def test_json_problem_names_the_first_offending_location(value: object, problem: str) -> None:
    """Non-JSON parts are reported with a path and the Python type."""
    found = json_problem(value)
    assert found is not None
    assert problem in found


def test_json_problem_accepts_plain_json() -> None:
    """Plain JSON values have no problem."""
    assert json_problem({"a": [1, 2.5, None, True, "s", {"b": []}]}) is None
    assert json_problem(None) is None


def test_json_problem_catches_cycles_without_recursion_errors() -> None:
    """A self-containing list is reported as too deep instead of recursing forever."""
    loop: list[object] = []
    loop.append(loop)
    found = json_problem(loop)
    assert found is not None
    assert "nested deeper than 256 levels" in found
