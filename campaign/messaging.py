"""Runs that message runs in a seed: a `relay` run's node sends two events (`ctx.signal`,
keys `relay-1` and `relay-2`) to a `hark` run that waits for them; what the operator does
for the pair and what the oracle then requires.

Runs in the campaign driver. The operator starts the receiver, then the sender with the
receiver's run id in its input (`start_input`); when the sender ended without sending both
events (a cancel, a park given up on, a refusal) the receiver would wait for ever, so the
operator cancels it as a person would (`tend`). The oracle (`check`, after the last stop,
from the database and the witnesses) requires, strictly, under every fault:

- every event the sender's node sent is one settled effect of the sender (`signal:<key>`,
  `applied`; `rejected` only when the receiver had been cancelled), never lost, pending or
  ambiguous (`signalUnsettled`): the send and its settlement are one transaction;
- the receiver holds exactly one event per key (`signalTwice`), the one the effect's
  result names (`signalMismatch`), and no other event (`signalStray`); a receiver that
  completed consumed both, oldest first, with the sender's data (`signalLost`, `output`);
- the witnesses outside the database agree (`witnessDisagrees`): every execution of the
  sending node that returned from a send recorded the signal id the effect settled with,
  at most one of them as a first send (`adopted: false`) per key, the others adopted; the
  receiver's last node recorded exactly the events it consumed;
- the sender's output lists the signal ids it sent and a refusal only when the receiver had
  been cancelled;
- a sender whose node killed its own runner after a send (planned on its first execution:
  after the first send, or after both; a `selfKill` witness says it happened, unless another
  fault ended that execution first) and then completed has a replay that adopted each send
  made before the kill (`signalNotAdopted`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from campaign import ledger as ledgers
from campaign.context import TERMINAL, RunTrack, SeedContext
from campaign.plan import PlannedRun
from campaign.surfaces import Answer

Send = Callable[..., Answer]

KEYS: Final = ("relay-1", "relay-2")
"""The keys of the two events a `relay` run's node sends, in order."""
SIGNAL_TYPE: Final = "signal:"
"""The effect type prefix of a sent event (`signal:<key>`)."""


def receiver_of(ctx: Any, track: RunTrack) -> RunTrack | None:
    """The `hark` track a `relay` track signals."""
    index = track.planned.signal_to
    return next((t for t in ctx.tracks if t.planned.index == index), None)


def sender_of(ctx: Any, track: RunTrack) -> RunTrack | None:
    """The `relay` track that signals a `hark` track."""
    index = track.planned.index
    return next((t for t in ctx.tracks if t.planned.signal_to == index), None)


def start_input(ctx: SeedContext, planned: PlannedRun) -> dict[str, Any] | None:
    """The input a planned run starts with: a `relay` run's names its receiver's run id
    (None until the receiver started: the sender waits for it)."""
    if planned.signal_to is None:
        return planned.input
    receiver = next((t for t in ctx.tracks if t.planned.index == planned.signal_to), None)
    if receiver is None or receiver.run_id is None:
        return None
    return {**planned.input, "to": receiver.run_id}


ORPHAN_GRACE: Final = 5.0
"""Seconds a receiver may go on after its sender ended (consuming events it was sent
before a cancel ended the sender) before the operator cancels it as orphaned."""


def tend(ctx: SeedContext, track: RunTrack, send: Send, *, max_resumes: int) -> None:
    """A `hark` run that still waits `ORPHAN_GRACE` seconds after its sender ended without
    sending both events (or was given up on) is cancelled, once: nothing else would ever
    send them."""
    if track.planned.workflow != "hark" or track.cancel_sent or track.status in TERMINAL:
        return
    sender = sender_of(ctx, track)
    if sender is None:
        return
    output = (sender.view or {}).get("output") or {}
    delivered = sender.status == "completed" and not output.get("refused")
    given_up = sender.stuck or (sender.status == "paused" and sender.resumes >= max_resumes)
    if delivered or not (given_up or sender.status in TERMINAL):
        return
    since = track.waiting_since.setdefault("senderEnded", time.monotonic())
    if track.status != "waiting" or time.monotonic() - since < ORPHAN_GRACE:
        return
    answer = send("cancel")
    track.cancel_sent = track.cancel_sent or answer.ok
    ctx.note(f"cancelled receiver {track.run_id}: its sender ended {sender.status}")


def check(ctx: SeedContext, ledger: ledgers.Ledger) -> None:
    """The oracle of every `relay`/`hark` pair of the seed (see the module docstring)."""
    for sender in ctx.tracks:
        receiver = receiver_of(ctx, sender) if sender.planned.signal_to is not None else None
        if receiver is None or sender.run_id is None or receiver.run_id is None:
            continue
        _pair(ctx, ledger, sender, receiver)


def _pair(ctx: SeedContext, ledger: ledgers.Ledger, sender: RunTrack, receiver: RunTrack) -> None:
    sender_id, receiver_id = str(sender.run_id), str(receiver.run_id)
    x = int(sender.planned.input["x"])
    effects = [e for e in ledger.sent if e.run_id == sender_id]
    by_type = Counter(e.effect_type for e in effects)
    for effect_type, count in by_type.items():
        if count > 1:
            ctx.violation("signalTwice", f"{count} effects {effect_type} of one visit", sender_id)
    lost = {e.effect_key for e in ledger.lost}
    applied: dict[str, ledgers.SentSignal] = {}
    for effect in effects:
        where = f"effect {effect.effect_type} of the sender"
        if effect.effect_key in lost:
            ctx.violation(
                "signalUnsettled", f"{where} has an attempt whose outcome was lost", sender_id
            )
        if effect.status == "applied":
            applied[effect.effect_type.removeprefix(SIGNAL_TYPE)] = effect
        elif effect.status != "rejected" or not receiver.cancel_sent:
            ctx.violation("signalUnsettled", f"{where} is {effect.status}", sender_id)
    events = [s for s in ledger.signals if s.run_id == receiver_id]
    keyed: dict[str, list[ledgers.SignalRow]] = {}
    for event in events:
        keyed.setdefault(str(event.idempotency_key), []).append(event)
    wanted = {e.effect_key for e in applied.values()}
    for event in events:
        if event.idempotency_key not in wanted:
            ctx.violation(
                "signalStray",
                f"event {event.signal_id} ({event.idempotency_key}) is no send of its sender",
                receiver_id,
            )
    for key, effect in applied.items():
        rows = keyed.get(effect.effect_key, [])
        signal_id = (effect.result or {}).get("signalId")
        if len(rows) != 1:
            ctx.violation("signalTwice", f"event {key} is stored {len(rows)} times", receiver_id)
        elif rows[0].signal_id != signal_id:
            ctx.violation(
                "signalMismatch",
                f"event {key} is {rows[0].signal_id}; the effect settled with {signal_id}",
                receiver_id,
            )
    consumed = [s for s in events if s.status == "consumed"]
    if receiver.status == "completed":
        if len(consumed) != len(KEYS) or len(applied) != len(KEYS):
            ctx.violation(
                "signalLost",
                f"the receiver completed having consumed"
                f" {len(consumed)} of {len(applied)} events sent",
                receiver_id,
            )
        output = (receiver.view or {}).get("output") or {}
        expected = {"n": [1, 2], "x": [x, x], "from": [sender_id]}
        if {k: output.get(k) for k in expected} != expected:
            ctx.violation("output", f"hark: output {output} is not {expected}", receiver_id)
    _witnessed(ctx, sender, receiver, applied)
    if sender.status == "completed":
        output = (sender.view or {}).get("output") or {}
        sent = [(applied[k].result or {}).get("signalId") for k in KEYS if k in applied]
        if output.get("sent") != sent:
            ctx.violation("output", f"relay: sent {output.get('sent')} is not {sent}", sender_id)
        if output.get("refused") and not receiver.cancel_sent:
            ctx.violation(
                "signalRefused", f"the receiver refused: {output.get('refused')}", sender_id
            )


def _witnessed(
    ctx: SeedContext,
    sender: RunTrack,
    receiver: RunTrack,
    applied: dict[str, ledgers.SentSignal],
) -> None:
    """The sender's and the receiver's witness files agree with the database."""
    sender_id, receiver_id = str(sender.run_id), str(receiver.run_id)
    lines = _lines(ctx, f"{sender_id}-sent")
    for key in KEYS:
        outcomes = [line.get("outcome") or {} for line in lines if line.get("key") == key]
        sent = [o for o in outcomes if "refused" not in o]
        ids = {o.get("signalId") for o in sent}
        effect = applied.get(key)
        settled = None if effect is None else (effect.result or {}).get("signalId")
        if sent and ids != {settled}:
            ctx.violation(
                "witnessDisagrees",
                f"the sender's executions saw event {key} as"
                f" {sorted(map(str, ids))}; the effect settled {settled}",
                sender_id,
            )
        firsts = sum(1 for o in sent if not o.get("adopted"))
        if firsts > 1:
            ctx.violation(
                "signalTwice",
                f"{firsts} executions sent event {key} afresh (none adopted the first send)",
                sender_id,
            )
        if sender.status == "completed" and effect is not None and not sent:
            ctx.violation(
                "witnessDisagrees", f"no execution of the sender witnessed sending {key}", sender_id
            )
    # The planned kill happens only if the first execution reaches it (another fault may
    # end that execution first); when it happened, a replay adopted every send before it.
    kills = [r for r in ctx.witnesses.self_kills if r.get("run") == sender_id]
    for record in kills if sender.status == "completed" else []:
        sends = int(str(record.get("where") or "").removeprefix("afterSend") or 0)
        for key in KEYS[:sends]:
            outcomes = [line.get("outcome") or {} for line in lines if line.get("key") == key]
            if not any(o.get("adopted") for o in outcomes):
                ctx.violation(
                    "signalNotAdopted",
                    f"the sender killed its runner after sending {key}, and no replay adopted it",
                    sender_id,
                )
    if receiver.status != "completed":
        return
    x = int(sender.planned.input["x"])
    expected = [{"x": x, "n": n, "from": sender_id} for n in (1, 2)]
    heard = _lines(ctx, f"{receiver_id}-heard")
    if not heard or any(line != expected for line in heard):
        ctx.violation(
            "witnessDisagrees", f"the receiver's witness heard {heard}, not {expected}", receiver_id
        )


def _lines(ctx: SeedContext, name: str) -> list[Any]:
    try:
        text = (ctx.witness_dir / "relay" / name).read_text()
    except OSError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]
