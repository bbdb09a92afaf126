"""Effect declarations: how a side-effecting node may be retried.

Every ``action`` and ``shell`` node declares one effect. The declaration is data only; the
runner and the server enforce it (reserve the effect before running, store the receipt after,
and decide from the kind what an interrupted attempt means). Never performs any effect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

_EFFECT_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]{0,127}$")


class EffectKind(StrEnum):
    """Whether an interrupted attempt of an effect may be retried automatically."""

    IDEMPOTENT = "idempotent"  # the outside system dedupes by key, or a read-back proves it
    MANUAL = "manual"  # never retried; an uncertain outcome stops the run for review


@dataclass(frozen=True)
class Effect:
    """The effect a node performs: its retry ``kind`` and a stable ``type`` label.

    ``type`` names the kind of outside change (``"github-comment"``, ``"deploy"``); it is
    shown to people reviewing an uncertain effect and goes into the definition snapshot.
    """

    kind: EffectKind
    type: str

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not _EFFECT_TYPE.match(self.type):
            raise ValueError(
                f"effect type must be 1-128 characters of letters, digits and _.:- starting "
                f"with a letter, got {self.type!r}"
            )


def idempotent_effect(type: str) -> Effect:
    """Declare an effect that is safe to retry with the same ``ctx.effect_key``.

    Pick it when the outside system deduplicates requests by a key you pass it (an
    idempotency key, a deterministic resource name) or when the node first reads back
    whether the change already happened.
    """
    return Effect(EffectKind.IDEMPOTENT, type)


def manual_effect(type: str) -> Effect:
    """Declare an effect that is never retried automatically.

    Pick it when a repeat could do harm and nothing can prove whether an interrupted attempt
    took place (sending an email, charging a card without a key). If the runner cannot tell
    whether the attempt finished, the run stops for a person to resolve the effect.
    """
    return Effect(EffectKind.MANUAL, type)
