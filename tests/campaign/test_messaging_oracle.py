"""The oracle's checks of runs that message runs (`ctx.signal`), on hand-made ledgers and
witness files: a `relay` run whose two sends are settled effects, each stored once in its
`hark` receiver and consumed by it, with witnesses that agree, passes; an event stored
twice, a send left unsettled or lost, a refusal of a receiver nobody cancelled, an event
lost or stray, witnesses that disagree with the database, and a planned kill after a send
that no replay adopted are violations."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from campaign.context import RunTrack, Violation
from campaign.messaging import check
from campaign.plan import Mode, PlannedRun

from campaign import ledger as ledgers

SENDER, RECEIVER, X = "run_s", "run_r", 41


class _Ctx(SimpleNamespace):
    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        found = Violation(1, kind, message, run_id)
        self.violations.append(found)
        return found

    def note(self, text: str) -> None:
        pass


def _facts(tmp_path: Path) -> tuple[_Ctx, ledgers.Ledger]:
    """A clean pair: both runs completed, both events sent once, consumed, witnessed."""
    receiver = RunTrack(
        PlannedRun(0, "hark", {"x": X}, 0.0, "k0", False, Mode.PLAIN), run_id=RECEIVER
    )
    sender = RunTrack(
        PlannedRun(1, "relay", {"x": X, "hold": [0.1, 0.1, 0.1]}, 0.0, "k1", False, signal_to=0),
        run_id=SENDER,
    )
    receiver.view = {"status": "completed", "output": {"n": [1, 2], "x": [X, X], "from": [SENDER]}}
    sender.view = {"status": "completed", "output": {"sent": ["sig_1", "sig_2"], "refused": None}}
    ledger = ledgers.Ledger()
    for n in (1, 2):
        key = f"{SENDER}:0:send:1:signal:relay-{n}"
        result = {"runId": RECEIVER, "signalId": f"sig_{n}", "seq": n}
        ledger.sent.append(ledgers.SentSignal(SENDER, key, f"signal:relay-{n}", "applied", result))
        data = {"x": X, "n": n, "from": SENDER}
        ledger.signals.append(
            ledgers.SignalRow(RECEIVER, f"sig_{n}", n, data, "consumed", f"att_{n}", key)
        )
    relay = tmp_path / "relay"
    relay.mkdir()
    _write(relay / f"{SENDER}-sent", [_sent(1, "sig_1"), _sent(2, "sig_2")])
    heard = [{"x": X, "n": n, "from": SENDER} for n in (1, 2)]
    _write(relay / f"{RECEIVER}-heard", [heard])
    witnesses = SimpleNamespace(self_kills=[])
    ctx = _Ctx(violations=[], tracks=[receiver, sender], witness_dir=tmp_path, witnesses=witnesses)
    return ctx, ledger


def _sent(n: int, signal_id: str, *, adopted: bool = False) -> dict[str, Any]:
    outcome = {"runId": RECEIVER, "signalId": signal_id, "seq": n, "adopted": adopted}
    return {"key": f"relay-{n}", "attempt": "att_s", "outcome": outcome}


def _write(path: Path, lines: list[Any]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def _kinds(ctx: _Ctx, ledger: ledgers.Ledger) -> list[str]:
    check(ctx, ledger)  # type: ignore[arg-type]
    return sorted({v.kind for v in ctx.violations})


def test_two_sends_stored_once_consumed_and_witnessed_pass(tmp_path: Path) -> None:
    """The facts of a clean pair, a send replayed and adopted after a kill among them."""
    ctx, ledger = _facts(tmp_path)
    relay = tmp_path / "relay" / f"{SENDER}-sent"
    _write(relay, [_sent(1, "sig_1"), _sent(1, "sig_1", adopted=True), _sent(2, "sig_2")])
    assert _kinds(ctx, ledger) == []


def _stored_twice(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    first = ledger.signals[0]
    ledger.signals.append(
        ledgers.SignalRow(RECEIVER, "sig_9", 9, first.data, "kept", None, first.idempotency_key)
    )


def _ambiguous(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    sent = ledger.sent[1]
    ledger.sent[1] = ledgers.SentSignal(
        SENDER, sent.effect_key, sent.effect_type, "ambiguous", None
    )


def _lost(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    key = ledger.sent[0].effect_key
    ledger.lost.append(ledgers.LostEffect(SENDER, key, "idempotent", "send", 1, 0, 1))


def _refused(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    sent = ledger.sent[1]
    ledger.sent[1] = ledgers.SentSignal(SENDER, sent.effect_key, sent.effect_type, "rejected", {})
    del ledger.signals[1]
    ctx.tracks[0].view = {"status": "cancelled"}
    ctx.tracks[1].view["output"] = {"sent": ["sig_1"], "refused": "run run_r has ended"}


def _not_consumed(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    row = ledger.signals[1]
    ledger.signals[1] = ledgers.SignalRow(
        RECEIVER, row.signal_id, row.seq, row.data, "kept", None, row.idempotency_key
    )


def _stray(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    ledger.signals.append(ledgers.SignalRow(RECEIVER, "sig_x", 3, {}, "kept", None, "other"))


def _mismatch(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    row = ledger.signals[0]
    ledger.signals[0] = ledgers.SignalRow(
        RECEIVER, "sig_other", row.seq, row.data, row.status, row.attempt_id, row.idempotency_key
    )


def _witness_other_id(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    _write(tmp_path / "relay" / f"{SENDER}-sent", [_sent(1, "sig_7"), _sent(2, "sig_2")])


def _two_fresh_sends(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    relay = tmp_path / "relay" / f"{SENDER}-sent"
    _write(relay, [_sent(1, "sig_1"), _sent(1, "sig_1"), _sent(2, "sig_2")])


def _heard_other(ctx: _Ctx, ledger: ledgers.Ledger, tmp_path: Path) -> None:
    heard = [{"x": X, "n": n, "from": SENDER} for n in (2, 1)]
    _write(tmp_path / "relay" / f"{RECEIVER}-heard", [heard])


Change = Callable[[_Ctx, ledgers.Ledger, Path], None]


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        (_stored_twice, "signalTwice"),
        (_ambiguous, "signalUnsettled"),
        (_lost, "signalUnsettled"),
        (_refused, "signalUnsettled"),
        (_not_consumed, "signalLost"),
        (_stray, "signalStray"),
        (_mismatch, "signalMismatch"),
        (_witness_other_id, "witnessDisagrees"),
        (_two_fresh_sends, "signalTwice"),
        (_heard_other, "witnessDisagrees"),
    ],
)
def test_each_broken_promise_of_a_pair_is_a_violation(
    tmp_path: Path, change: Change, kind: str
) -> None:
    """One change to the clean facts, and the oracle names it."""
    ctx, ledger = _facts(tmp_path)
    change(ctx, ledger, tmp_path)
    assert kind in _kinds(ctx, ledger)


def test_a_refusal_by_a_receiver_the_operator_cancelled_passes(tmp_path: Path) -> None:
    """A receiver cancelled before the second send refuses it: settled `rejected`, the
    sender's output names the refusal, and nothing else is wrong."""
    ctx, ledger = _facts(tmp_path)
    _refused(ctx, ledger, tmp_path)
    ctx.tracks[0].cancel_sent = True
    _write(tmp_path / "relay" / f"{SENDER}-sent", [_sent(1, "sig_1")])
    assert _kinds(ctx, ledger) == []


def test_a_send_before_the_senders_own_kill_must_be_adopted_by_its_replay(tmp_path: Path) -> None:
    """The sender killed its runner after its first send (witnessed): with the replay's send
    adopted it passes; without an adopted send it is `signalNotAdopted`. A kill after both
    sends needs both adopted. A planned kill that never happened (another fault ended the
    first execution first) requires nothing."""
    ctx, ledger = _facts(tmp_path)
    ctx.tracks[1].planned.input["kill"] = 1
    kill = {"e": "selfKill", "run": SENDER, "where": "afterSend1", "pid": 9, "t": 1.0}
    ctx.witnesses.self_kills.append(kill)
    relay = tmp_path / "relay" / f"{SENDER}-sent"
    _write(relay, [_sent(1, "sig_1"), _sent(1, "sig_1", adopted=True), _sent(2, "sig_2")])
    assert _kinds(ctx, ledger) == []
    _write(relay, [_sent(1, "sig_1"), _sent(2, "sig_2")])
    assert _kinds(ctx, ledger) == ["signalNotAdopted"]
    ctx.violations.clear()
    kill["where"] = "afterSend2"
    _write(relay, [_sent(1, "sig_1"), _sent(1, "sig_1", adopted=True), _sent(2, "sig_2")])
    assert _kinds(ctx, ledger) == ["signalNotAdopted"]
    ctx.violations.clear()
    ctx.witnesses.self_kills.clear()
    _write(relay, [_sent(1, "sig_1"), _sent(2, "sig_2")])
    assert _kinds(ctx, ledger) == []
