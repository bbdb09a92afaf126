"""Edges and switches: the authoring side of routing.

Owns the edge types, the ``$.path`` / ``$result.path`` syntax and the normalisation of switch
case values. It parses and checks; deciding where a run goes is the engine's job
(``pi_workflows.engine``), which reads these structures and never re-parses text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeAlias

from pi_workflows.authoring.locations import remember

CaseValue: TypeAlias = str | int | bool | None
"""A switch case value: a JSON string, integer, boolean or null."""

_SEGMENT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_-]*|0|[1-9][0-9]*)$")


class PathScope(StrEnum):
    """What a switch path reads."""

    OUTPUT = "output"  # ``$...``: the node's accepted output (only for ``ok`` results)
    RESULT = "result"  # ``$result...``: the node's result record (``outcome``, ``error``)


@dataclass(frozen=True)
class FieldPath:
    """A parsed switch path such as ``$.route``, ``$.items.0`` or ``$result.outcome``.

    ``segments`` are object keys, or list indexes for all-digit segments. ``$`` alone (no
    segments) is the whole output.
    """

    text: str
    scope: PathScope
    segments: tuple[str, ...]

    @property
    def is_outcome(self) -> bool:
        """Whether this is exactly ``$result.outcome``, the only path that routes failures."""
        return self.scope is PathScope.RESULT and self.segments == ("outcome",)


def parse_path(text: str) -> FieldPath:
    """Parse a switch path; raise ``ValueError`` naming the problem if it is malformed."""
    if not isinstance(text, str):
        raise ValueError(f"a switch path must be a string, got {type(text).__name__}")
    if text == "$" or text.startswith("$."):
        scope, rest = PathScope.OUTPUT, text[1:]
    elif text == "$result" or text.startswith("$result."):
        scope, rest = PathScope.RESULT, text[len("$result") :]
        if not rest:
            raise ValueError("'$result' needs a field, such as '$result.outcome'")
    else:
        raise ValueError(
            f"switch path {text!r} must start with '$.' (the output) or '$result.' (the result)"
        )
    segments = tuple(rest[1:].split(".")) if rest else ()
    for segment in segments:
        if not _SEGMENT.match(segment):
            raise ValueError(f"switch path {text!r} has a malformed segment {segment!r}")
    return FieldPath(text, scope, segments)


def case_key(value: object) -> tuple[str, object]:
    """The normalised identity of a case value, so ``True`` and ``1`` stay different.

    Numbers compare by value whatever their Python type (``1`` matches ``1.0``); booleans,
    strings and null only match their own kind. Other values get a key no case can have.
    """
    if value is None:
        return ("null", None)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    return ("unmatchable", id(value))


@dataclass(frozen=True)
class Edge:
    """An unconditional edge: after ``source`` succeeds, run ``target``."""

    source: str
    target: str

    def targets(self) -> tuple[str, ...]:
        """Every node this edge can lead to."""
        return (self.target,)


@dataclass(frozen=True)
class Case:
    """One switch arm: when the value at the path equals ``value``, run ``target``."""

    value: CaseValue
    target: str


@dataclass(frozen=True)
class Switch:
    """A conditional edge out of ``source``, choosing a target by the value at ``on``.

    ``on`` is the path text as written; ``path`` is its parsed form (the ``Workflow``
    rejects a malformed path at load, naming the node). ``default`` is taken for an ``ok``
    result whose value matches no case; it never applies to a failed or timed-out node,
    which continues only through a ``$result.outcome`` case.
    """

    source: str
    on: str
    cases: tuple[Case, ...]
    default: str | None = None
    failed: str | None = None
    """Where a failed ``source`` goes, whatever ``on`` reads (None: the run fails)."""
    timed_out: str | None = None
    """Where a timed-out ``source`` goes, whatever ``on`` reads (None: the run times out)."""

    @property
    def path(self) -> FieldPath:
        """The parsed ``on`` path; raises ``ValueError`` if it is malformed."""
        return parse_path(self.on)

    def targets(self) -> tuple[str, ...]:
        """Every node this switch can lead to, in declaration order, default last."""
        found = [case.target for case in self.cases]
        found += [t for t in (self.default, self.failed, self.timed_out) if t is not None]
        return tuple(dict.fromkeys(found))

    def outcome_target(self, outcome: str) -> str | None:
        """Where a ``failed`` or ``timed_out`` node goes: its ``failed=`` / ``timed_out=``
        target, else a ``$result.outcome`` case for it, else None."""
        given = {"failed": self.failed, "timed_out": self.timed_out}.get(outcome)
        if given is not None:
            return given
        return self.target_for(outcome) if self.path.is_outcome else None

    def target_for(self, value: object) -> str | None:
        """The case target for ``value`` (not the default), or ``None`` if no case matches."""
        wanted = case_key(value)
        for case in self.cases:
            if case_key(case.value) == wanted:
                return case.target
        return None


Route: TypeAlias = Edge | Switch
"""An outgoing route of a node: at most one per node."""


def edge(source: str, target: str) -> Edge:
    """Route ``source`` to ``target`` whenever ``source`` succeeds (outcome ``ok``)."""
    return remember(Edge(source, target))


def switch(
    source: str,
    on: str,
    cases: Mapping[CaseValue, str],
    *,
    default: str | None = None,
    failed: str | None = None,
    timed_out: str | None = None,
) -> Switch:
    """Route ``source`` by the value at ``on``: ``$.field`` of the output or ``$result.field``.

    ``cases`` maps values (strings, integers, booleans, null) to target node ids; they route
    an ``ok`` result. ``failed=`` and ``timed_out=`` route a failed or timed-out node on any
    switch, so one switch routes by outcome and by value at once (a poll loop needs no
    extra node); a ``$result.outcome`` switch may instead list ``"failed"`` and
    ``"timed_out"`` as cases (not both ways for one outcome). An ``ok`` value that matches
    no case takes ``default`` if given, else fails the run naming the value and the node.
    Paths, case values and targets are checked when the ``Workflow`` is built, so the error
    can name the workflow and the node.
    """
    if not isinstance(cases, Mapping):
        raise TypeError(
            f"switch after {source!r}: cases must be a mapping of value -> node id, "
            f"got {type(cases).__name__}"
        )
    return remember(
        Switch(
            source,
            on,
            tuple(Case(value, target) for value, target in cases.items()),
            default,
            failed,
            timed_out,
        )
    )
