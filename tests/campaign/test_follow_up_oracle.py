"""The oracle's follow-up check, on hand-made ledgers and session records: a completed
run's follow-ups sent after its result in queue order pass; one left queued after the
result was delivered, one still waiting on a failed run, and one presented before the
result or out of order are violations."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from campaign.context import Violation
from campaign.oracle import _follow_ups

from campaign import ledger as ledgers


class _Ctx(SimpleNamespace):
    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        found = Violation(1, kind, message, run_id)
        self.violations.append(found)
        return found


def _ledger(status: str, follow: list[tuple[int, str, str | None]]) -> ledgers.Ledger:
    ledger = ledgers.Ledger()
    ledger.runs["run_a"] = ledgers.RunRow("run_a", "chain", None, "run_a", status)
    ledger.messages.append(ledgers.Message("msg_t", "run_a", "terminal", "sent", "e-t", "s", False))
    for seq, state, message in follow:
        ledger.follow_ups.append(ledgers.FollowUpRow(f"fup_{seq}", "run_a", seq, state, message))
    return ledger


def _records(*messages: str) -> dict[str, list[dict[str, Any]]]:
    return {"s": [{"e": "present", "msg": m, "entry": f"e-{m}"} for m in messages]}


def _kinds(ledger: ledgers.Ledger, records: dict[str, list[dict[str, Any]]]) -> list[str]:
    ctx = _Ctx(violations=[])
    _follow_ups(ctx, ledger, records)  # type: ignore[arg-type]
    return [v.kind for v in ctx.violations]


def test_follow_ups_sent_after_the_result_in_order_pass() -> None:
    ledger = _ledger("completed", [(1, "sent", "msg_1"), (2, "sent", "msg_2")])
    assert _kinds(ledger, _records("msg_t", "msg_1", "msg_2")) == []


def test_a_follow_up_left_queued_after_a_delivered_result_is_a_violation() -> None:
    ledger = _ledger("completed", [(1, "sent", "msg_1"), (2, "queued", None)])
    assert _kinds(ledger, _records("msg_t", "msg_1")) == ["followUpNotSent"]


def test_a_follow_up_still_waiting_on_a_failed_run_is_a_violation() -> None:
    ledger = _ledger("failed", [(1, "queued", None), (2, "cancelled", None)])
    assert _kinds(ledger, _records("msg_t")) == ["followUpNotCancelled"]


def test_follow_ups_before_the_result_or_out_of_order_are_violations() -> None:
    ledger = _ledger("completed", [(1, "sent", "msg_1"), (2, "sent", "msg_2")])
    assert _kinds(ledger, _records("msg_1", "msg_t", "msg_2")) == ["followUpOutOfOrder"]
    assert _kinds(ledger, _records("msg_t", "msg_2", "msg_1")) == ["followUpOutOfOrder"]
