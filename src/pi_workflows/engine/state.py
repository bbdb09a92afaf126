"""Node results and the durable run state the engine reads.

Owns ``NodeResult`` (what one node execution produced: ``ok`` with an output, ``failed`` or
``timed_out`` with an error) and ``RunState`` (accepted outputs, result records, visit
counts and the executed-step count of a run). Both are immutable values; the runner stores
them through the server and hands them back to the engine. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pi_workflows.authoring import JsonValue, Outcome, json_problem
from pi_workflows.engine.errors import NotJsonError


def _frozen() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class NodeResult:
    """The result of one node execution.

    Invariants: ``ok`` has an ``output`` (a JSON value, possibly ``None``) and no ``error``;
    ``failed`` and ``timed_out`` have a non-empty one-line ``error`` and no output. A value
    that is not plain JSON raises ``NotJsonError`` (use ``result_from_output`` to turn a
    callback's return value into a result, failing the node instead).
    ``details`` is an optional JSON object copied into the result record (a failed shell
    command puts its exit code and output tail there). Build it with ``NodeResult.ok``,
    ``NodeResult.failed`` or ``NodeResult.timed_out``; cancellation is not a result.
    ``cause`` is the exception the node's code raised, for a failure that came from one: the
    runner classifies it for the node's retry policy; it is never stored, compared or routed.
    ``cause_classes`` are the qualified class names of such an exception when only they are
    known (a failure adopted from a runner that died after recording it).
    """

    outcome: Outcome
    output: JsonValue = None
    error: str | None = None
    details: Mapping[str, JsonValue] | None = None
    cause: BaseException | None = field(default=None, compare=False, repr=False)
    cause_classes: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.outcome, Outcome):
            raise ValueError(f"outcome must be an Outcome, got {self.outcome!r}")
        if self.outcome is Outcome.OK:
            if self.error is not None:
                raise ValueError("an ok result has no error")
        else:
            if not isinstance(self.error, str) or not self.error:
                raise ValueError(f"a {self.outcome.value} result needs an error message")
            if self.output is not None:
                raise ValueError(f"a {self.outcome.value} result has no output")
        problem = json_problem(self.output)
        if problem is not None:
            raise NotJsonError("the node output", problem)
        if self.details is not None:
            problem = json_problem(dict(self.details))
            if problem is not None:
                raise NotJsonError("the result details", problem)

    @classmethod
    def ok(cls, output: JsonValue) -> NodeResult:
        """The node produced ``output`` (already checked to be JSON)."""
        return cls(Outcome.OK, output)

    @classmethod
    def failed(
        cls,
        error: str,
        details: Mapping[str, JsonValue] | None = None,
        *,
        cause: BaseException | None = None,
        cause_classes: tuple[str, ...] = (),
    ) -> NodeResult:
        """The node failed with ``error`` (one line, safe to show); ``cause`` is the
        exception its code raised, if one did (``cause_classes``: only its class names)."""
        return cls(Outcome.FAILED, None, error, details, cause, cause_classes)

    @classmethod
    def timed_out(
        cls,
        error: str = "the node's deadline passed",
        details: Mapping[str, JsonValue] | None = None,
    ) -> NodeResult:
        """The node's deadline passed before it produced an output."""
        return cls(Outcome.TIMED_OUT, None, error, details)

    def record(self) -> dict[str, JsonValue]:
        """The result record that ``$result.*`` paths and ``ctx.results`` read.

        ``{"outcome": "ok" | "failed" | "timed_out", "error": str | None}`` plus
        ``"details"`` when present.
        """
        record: dict[str, JsonValue] = {"outcome": self.outcome.value, "error": self.error}
        if self.details is not None:
            record["details"] = dict(self.details)
        return record


@dataclass(frozen=True)
class RunState:
    """The durable state of a run, as the engine needs it.

    ``outputs``: node id -> accepted output of that node's latest visit (removed when the
    latest visit failed or timed out). ``results``: node id -> result record of its latest
    visit. ``visits``: node id -> how many times it has executed. ``steps``: executed
    nodes in the whole run; ``steps`` equals the sum of ``visits``.
    """

    outputs: Mapping[str, JsonValue] = field(default_factory=_frozen)
    results: Mapping[str, Mapping[str, JsonValue]] = field(default_factory=_frozen)
    visits: Mapping[str, int] = field(default_factory=_frozen)
    steps: int = 0

    @classmethod
    def initial(cls) -> RunState:
        """The state of a run before its first node executes."""
        return cls()

    def visit_of(self, node_id: str) -> int:
        """The visit number the next execution of ``node_id`` will have (from 1)."""
        return self.visits.get(node_id, 0) + 1

    def record(self, node_id: str, result: NodeResult) -> RunState:
        """The state after ``node_id`` executed once more with ``result``."""
        outputs = dict(self.outputs)
        if result.outcome is Outcome.OK:
            outputs[node_id] = result.output
        else:
            outputs.pop(node_id, None)
        results = dict(self.results)
        results[node_id] = MappingProxyType(result.record())
        visits = dict(self.visits)
        visits[node_id] = visits.get(node_id, 0) + 1
        return RunState(
            outputs=MappingProxyType(outputs),
            results=MappingProxyType(results),
            visits=MappingProxyType(visits),
            steps=self.steps + 1,
        )
