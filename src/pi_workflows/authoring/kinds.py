"""The node kinds: the one enum every node class names its kind with.

Its own module so that node classes defined in different modules (``nodes``,
``composition``) share it without importing each other.
"""

from __future__ import annotations

from enum import StrEnum


class NodeKind(StrEnum):
    """The primitive node kinds. Helpers such as ``decision`` compile to one of these."""

    COMPUTE = "compute"
    ACTION = "action"
    SHELL = "shell"
    NOTIFY = "notify"
    AGENT = "agent"
    CHECKPOINT = "checkpoint"
    HUMAN_DECISION = "human_decision"
    SLEEP = "sleep"
    WAIT_EVENT = "wait_event"
    SUBWORKFLOW = "subworkflow"
    FAN_OUT = "fan_out"
