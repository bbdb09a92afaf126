"""Events one run sends another (``ctx.signal``): a managed effect of the sending node visit.

Owns no table: a sent event is an ``effects`` row of the sender (type ``signal:<key>``,
kind ``idempotent``, keyed like every effect by run, round, node, visit and type) and a
``run_signals`` row of the target (``store/signals.py``), written in **one transaction**
under the sending runner's claim: the effect is reserved, the event stored (waking the
target's wait, if it waits for that name), and the effect settled ``applied`` with
``{runId, signalId, seq}``, or ``rejected`` with the one-line reason when the target takes
no event (it has ended, it does not exist). There is no window in which the event may or
may not have been sent, so there is nothing ambiguous to resolve: a runner killed before the
commit sends nothing, one killed after it finds the effect settled and adopts its outcome
(the event is never sent twice). A retry policy's next try of the visit reserves the same
key again, as for any idempotent effect, and sends with the same idempotency key, which the
target adopts. A stale runner is refused by the claim check before anything is written.

The target's event idempotency key is the effect key, so it is unique to the sending
visit and ``key``. The same ``key`` with another target, name or data in the same visit
is a conflict (``EffectConflictError``). A run may not signal itself (its own waits take
events from outside).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pi_workflows.protocol import fingerprint
from pi_workflows.store import attempts, effects, faults, signals
from pi_workflows.store.claims import Claim
from pi_workflows.store.database import Database, Transaction
from pi_workflows.store.effects import EffectStatus
from pi_workflows.store.errors import (
    InvalidTransitionError,
    ReceiptConflictError,
    RunNotFoundError,
)
from pi_workflows.store.runs import RunRow, write_run
from pi_workflows.store.states import RunStatus

TYPE_PREFIX: Final = "signal:"
"""The effect type of a sent event: ``signal:<key>``."""

faults.declare(
    "sent_signals.send", "an event one run sends another, with the sender's settled effect"
)


@dataclass(frozen=True)
class SentEvent:
    """What a ``ctx.signal`` did: ``applied`` (the event is stored for ``target``) or
    ``rejected`` (``error`` says why); ``adopted`` when an earlier attempt had sent it."""

    status: EffectStatus
    target: str
    effect_id: str
    signal_id: str | None = None
    seq: int | None = None
    error: str | None = None
    adopted: bool = False

    def to_json(self) -> dict[str, Any]:
        """The runner's reply payload (``signal.send``)."""
        return {
            "status": self.status.value,
            "runId": self.target,
            "effectId": self.effect_id,
            "signalId": self.signal_id,
            "seq": self.seq,
            "error": self.error,
            "adopted": self.adopted,
        }


def send(
    db: Database,
    claim: Claim,
    attempt_id: str,
    target: str,
    name: str,
    data: Any,
    key: str,
) -> SentEvent:
    """Send the event ``name`` with ``data`` to run ``target`` from the running attempt
    ``attempt_id`` of the claimed run, once per (visit, ``key``).

    Raises ``ClaimLostError`` for a claim that is not live, ``InvalidTransitionError`` for
    an attempt that is not the run's active one or a run signalling itself,
    ``EffectConflictError`` when ``key`` was used for another event; nothing is written."""
    sender = claim.run_id
    effect_type = f"{TYPE_PREFIX}{key}"
    digest = fingerprint({"target": target, "name": name, "data": data})
    done: list[SentEvent] = []
    event: dict[str, Any] = {"attemptId": attempt_id, "effectType": effect_type, "target": target}

    def apply(tx: Transaction, run: RunRow) -> None:
        active = attempts.unfinished(tx.conn, sender)
        if run.status is not RunStatus.RUNNING or active is None or active.attempt_id != attempt_id:
            raise InvalidTransitionError(
                sender, "send an event from", run.status.value, f"{attempt_id} is not active"
            )
        if target == sender:
            raise InvalidTransitionError(
                sender, f"send event {name!r} to", run.status.value, "a run cannot signal itself"
            )
        reservation = effects.reserve(
            tx, run_id=sender, round_no=run.round, generation=claim.generation,
            node_attempt_id=attempt_id, node_id=active.node_id, visit=active.visit,
            effect_type=effect_type, effect_kind="idempotent", fingerprint=digest,
        )  # fmt: skip
        if not reservation.run_body:  # sent (or refused) by an earlier attempt: adopt it
            stored = reservation.result if isinstance(reservation.result, dict) else {}
            done.append(
                SentEvent(
                    reservation.status,
                    target,
                    reservation.effect_id,
                    stored.get("signalId"),
                    stored.get("seq"),
                    reservation.error,
                    True,
                )
            )
            return
        try:  # every refusal below comes before signals.send writes anything
            sent = signals.send(
                db, target, name, data, idempotency_key=reservation.effect_key,
                sent_by=f"run:{sender}",
            )  # fmt: skip
        except (RunNotFoundError, InvalidTransitionError, ReceiptConflictError) as exc:
            error = str(exc)
            effects.settle(tx, sender, reservation.effect_id, EffectStatus.REJECTED, error=error)
            done.append(
                SentEvent(EffectStatus.REJECTED, target, reservation.effect_id, error=error)
            )
            return
        result = {"runId": target, "signalId": sent.signal.signal_id, "seq": sent.signal.seq}
        effects.settle(
            tx, sender, reservation.effect_id, EffectStatus.APPLIED, result=result,
            receipt={"event": name},
        )  # fmt: skip
        done.append(
            SentEvent(
                EffectStatus.APPLIED,
                target,
                reservation.effect_id,
                sent.signal.signal_id,
                sent.signal.seq,
                adopted=sent.adopted,  # a retry-policy try: the target had it already
            )
        )

    def recorded(tx: Transaction, run: RunRow) -> None:
        apply(tx, run)
        event["status"] = done[0].status.value  # the history line: `effect applied`

    write_run(
        db,
        sender,
        name="sent_signals.send",
        event_type="effect.settled",
        event_data=event,
        claim=claim,
        apply=recorded,
    )
    return done[0]
