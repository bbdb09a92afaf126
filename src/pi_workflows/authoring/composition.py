"""Composition: nodes that run other workflows as child runs and wait for them.

``subworkflow`` starts one child run and waits for it; ``fan_out`` starts one child run
per item of a list, at most ``concurrency`` at once (and, with ``rate``, at most so many
starts per second, minute or hour), and waits for all of them. A child is
an ordinary run (its own runner, claim and effects keys) that knows its parent; while the
parent waits it holds no runner and no claim. Data only: constructors check their values,
the ``Workflow`` checks the rest at load, the runner and the server do the work.

Output shapes (documented for authors in ``docs/authoring.md``):

- ``subworkflow``: the child's final output; its outcome is the child's (``completed`` ->
  ``ok``, ``failed``, ``timed_out``; a cancelled child fails the node);
- ``fan_out``: ``[{"runId", "outcome", "output", "error"}, ...]`` in item order; ``ok`` when
  every child completed, else ``failed`` with the same list as the result's ``details``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol, TypeAlias, runtime_checkable

from pi_workflows.authoring.context import NodeContext
from pi_workflows.authoring.kinds import NodeKind
from pi_workflows.authoring.locations import remember

MAX_ITEMS: Final = 1000
"""The most children one ``fan_out`` starts."""

MAX_CONCURRENCY: Final = 1000
"""The most children of one ``fan_out`` that may be active at once."""

MAX_DEPTH: Final = 8
"""How deep runs may nest (a root run is depth 0): a workflow that fans out to itself
stops there with a clear failure instead of growing without bound."""

MAX_RATE_COUNT: Final = 10_000
"""The most starts one ``rate`` allows per period."""

RATE_PERIODS: Final[Mapping[str, int]] = {"s": 1_000, "min": 60_000, "h": 3_600_000}
"""The periods a ``rate`` may name, in milliseconds."""

_RATE: Final = re.compile(r"\A\s*(\d{1,6})\s*/\s*(s|min|h)\s*\Z")


@dataclass(frozen=True)
class Rate:
    """At most ``count`` child starts in any window of ``period_ms`` milliseconds; ``text``
    is what the author wrote (``"10/min"``). Build it with ``parse_rate``."""

    count: int
    period_ms: int
    text: str


def parse_rate(text: object) -> Rate:
    """``"N/s"``, ``"N/min"`` or ``"N/h"`` (N from 1 to 10,000) as a ``Rate``; anything else
    raises ``ValueError`` with one line saying what a rate looks like."""
    found = _RATE.match(text) if isinstance(text, str) else None
    count = int(found.group(1)) if found else 0
    if found is None or not 1 <= count <= MAX_RATE_COUNT:
        raise ValueError(
            f"fan_out rate must be 'N/s', 'N/min' or 'N/h' with N from 1 to {MAX_RATE_COUNT}"
            f" (e.g. rate='10/min'), got {text!r}"
        )
    unit = found.group(2)
    return Rate(count, RATE_PERIODS[unit], f"{count}/{unit}")


ChildInput: TypeAlias = Callable[[NodeContext], object]
"""``input(ctx)``: the child run's input (JSON)."""
ItemInput: TypeAlias = Callable[[NodeContext, object], object]
"""``input(ctx, item)``: the input of the child run of one item (JSON)."""


@runtime_checkable
class WorkflowLike(Protocol):
    """What composition needs of a ``Workflow`` object (this module cannot import the class:
    a ``Workflow`` is built from nodes, so it imports them)."""

    @property
    def name(self) -> str: ...

    @property
    def defined_in(self) -> str | None: ...

    @property
    def nodes(self) -> Mapping[str, object]: ...


WorkflowSpec: TypeAlias = "str | WorkflowLike"
"""A workflow name (found like ``run start``: project, user, ``builtin:NAME``, a path) or a
``Workflow`` object imported from a project-local module."""


@dataclass(frozen=True, kw_only=True)
class SubworkflowNode:
    """Starts one child run of ``workflow`` and waits for it with no runner."""

    workflow: WorkflowSpec
    input: ChildInput | None = None
    detached: bool = False
    kind: NodeKind = dataclasses.field(default=NodeKind.SUBWORKFLOW, init=False)

    @property
    def timeout(self) -> float | None:
        """A child run has its own deadlines; the node waits as long as it runs."""
        return None


@dataclass(frozen=True, kw_only=True)
class FanOutNode:
    """Starts one child run of ``workflow`` per item and waits for all of them."""

    workflow: WorkflowSpec
    items: Callable[[NodeContext], object]
    input: ItemInput | None = None
    concurrency: int = 4
    fail_fast: bool = False
    detached: bool = False
    rate: Rate | None = None
    kind: NodeKind = dataclasses.field(default=NodeKind.FAN_OUT, init=False)

    @property
    def timeout(self) -> float | None:
        """Each child has its own deadlines; the node waits for all of them."""
        return None


def _check_workflow(workflow: object) -> WorkflowSpec:
    if isinstance(workflow, WorkflowLike) and not isinstance(workflow, str):
        return workflow
    if not isinstance(workflow, str) or not workflow.strip():
        raise TypeError(
            "the child workflow must be a workflow name (as for 'run start': NAME,"
            f" builtin:NAME or a path) or a Workflow object, got {workflow!r}"
        )
    return workflow


def subworkflow(
    workflow: WorkflowSpec, input: ChildInput | None = None, *, detached: bool = False
) -> SubworkflowNode:
    """Run ``workflow`` as a child run (its input ``input(ctx)``, default ``{}``) and wait.

    The child's output is the node's output and its end the node's outcome (routable with
    ``$result.outcome``). ``detached=True`` runs the child's agent steps in a headless Pi
    of their own instead of the parent's origin session.
    """
    if input is not None and not callable(input):
        raise TypeError(f"subworkflow input must be a callback input(ctx), got {input!r}")
    if not isinstance(detached, bool):
        raise TypeError(f"subworkflow detached must be True or False, got {detached!r}")
    return remember(
        SubworkflowNode(workflow=_check_workflow(workflow), input=input, detached=detached)
    )


def fan_out(
    workflow: WorkflowSpec,
    items: Callable[[NodeContext], object],
    input: ItemInput | None = None,
    *,
    concurrency: int = 4,
    fail_fast: bool = False,
    detached: bool = False,
    rate: str | None = None,
) -> FanOutNode:
    """Run ``workflow`` once per item of ``items(ctx)`` (a JSON list, at most 1,000), at
    most ``concurrency`` children at once, and wait for all of them.

    Each child's input is ``input(ctx, item)`` (default: the item itself). The output is a
    list in item order of ``{"runId", "outcome", "output", "error"}``; the outcome is ``ok``
    when every child completed, else ``failed`` (the list is then the result's
    ``details``). ``fail_fast=True`` cancels the rest at the first failure. ``detached=True``
    gives each child's agent steps a headless Pi of their own, so sub-agents work in
    parallel. ``rate="10/min"`` (or ``"N/s"``, ``"N/h"``) also bounds how many children
    start in any window of that period, durably: the server records each start and holds
    the next one until the window allows it, across server restarts.
    """
    if not callable(items):
        raise TypeError(f"fan_out items must be a callback items(ctx), got {items!r}")
    if input is not None and not callable(input):
        raise TypeError(f"fan_out input must be a callback input(ctx, item), got {input!r}")
    if (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not 1 <= concurrency <= MAX_CONCURRENCY
    ):
        raise ValueError(
            f"fan_out concurrency must be an integer from 1 to {MAX_CONCURRENCY},"
            f" got {concurrency!r}"
        )
    for name, flag in (("fail_fast", fail_fast), ("detached", detached)):
        if not isinstance(flag, bool):
            raise TypeError(f"fan_out {name} must be True or False, got {flag!r}")
    paced = None if rate is None else parse_rate(rate)
    return remember(
        FanOutNode(
            workflow=_check_workflow(workflow),
            items=items,
            input=input,
            concurrency=concurrency,
            fail_fast=fail_fast,
            detached=detached,
            rate=paced,
        )
    )
