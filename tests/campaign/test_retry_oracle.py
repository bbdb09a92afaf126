"""The oracle's checks of `run retry`, on hand-made views, histories and witnesses: a
`botch` run that failed by design and its retry, a new run forked at the failed `check`
visit that records `retry: true`, completes with its output and applies no effect again,
pass; a retry that is the same run, was made twice, names another fork point, lacks its
provenance, did not complete, or applied an effect of the failed run again is a violation,
and so is a source that did not fail by design or was never retried."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from campaign.context import RunTrack, Violation
from campaign.plan import Mode, PlannedRun
from campaign.retrying import check, fails_by_design
from campaign.witness import Body, Witnesses

SOURCE, RETRY, X = "run_src", "run_try", 3
INPUT = {"x": X, "ticket": "t", "hold": [0.1, 0.1], "checkHold": 0.1}
ERROR = "node check failed: RuntimeError: the ledger is closed (a planned failure)"


class _Ctx(SimpleNamespace):
    def violation(self, kind: str, message: str, run_id: str | None = None) -> Violation:
        found = Violation(1, kind, message, run_id)
        self.violations.append(found)
        return found


class _Surfaces(SimpleNamespace):
    def read(self, method: str, run_id: str) -> Any:
        return self.answers[(method, run_id)]


def _body(nonce: str, run: str, node: str) -> Body:
    kind = "manual" if node == "charge" else "idempotent"
    body = Body(nonce, "action", kind, f"{run}-{node}", run, node, 1, 100)
    body.events = ["start", "applied", "done"]
    return body


def _facts(tmp_path: Path) -> _Ctx:
    """A clean retry: the source failed at `check`, the retry carried `prepare` and
    `charge` (their bodies ran once, in the source) and completed."""
    source = RunTrack(PlannedRun(0, "botch", INPUT, 0.0, "k0", False, Mode.PLAIN), SOURCE)
    source.view = {"status": "failed", "error": ERROR}
    retry = RunTrack(PlannedRun(1, "botch", INPUT, 0.0, "k1", True, retry_of=0), RETRY)
    retry.start_answers = [RETRY, RETRY]
    carried = [{"nodeId": n, "visit": 1, "carriedFrom": "att"} for n in ("prepare", "charge")]
    retry.view = {
        "status": "completed",
        "output": {"prepared": 23 * X, "charged": 29 * X},
        "lineage": {"forkedFrom": {"runId": SOURCE, "nodeId": "check", "visit": 1}},
        "attempts": [*carried, {"nodeId": "check", "visit": 1}, {"nodeId": "done", "visit": 1}],
    }
    witnesses = Witnesses(tmp_path)
    for body in (_body("n1", SOURCE, "prepare"), _body("n2", SOURCE, "charge")):
        witnesses.bodies[body.nonce] = body
        witnesses.order.append(body.nonce)
    answers = {
        ("get_run", SOURCE): {"status": "failed", "lineage": {"forks": [{"runId": RETRY}]}},
        ("history", RETRY): [
            {"type": "run.forked", "data": {"sourceRunId": SOURCE, "retry": True}}
        ],
    }
    surfaces = _Surfaces(answers=answers)
    return _Ctx(violations=[], tracks=[source, retry], witnesses=witnesses, surfaces=surfaces)


def _kinds(ctx: _Ctx) -> list[str]:
    check(ctx)  # type: ignore[arg-type]
    return sorted({v.kind for v in ctx.violations})


def test_a_retry_forked_at_the_failure_that_completed_once_passes(tmp_path: Path) -> None:
    """The clean facts, a second answer of the same key naming the same run among them."""
    ctx = _facts(tmp_path)
    assert _kinds(ctx) == []
    assert fails_by_design(ctx.tracks[0])
    assert not fails_by_design(ctx.tracks[1])


def _same_run(ctx: _Ctx) -> None:
    ctx.tracks[1].run_id = SOURCE
    ctx.tracks[1].start_answers = [SOURCE]
    ctx.surfaces.answers[("history", SOURCE)] = []


def _two_answers(ctx: _Ctx) -> None:
    ctx.tracks[1].start_answers = [RETRY, "run_other"]


def _two_forks(ctx: _Ctx) -> None:
    forks = [{"runId": RETRY}, {"runId": "run_other"}]
    ctx.surfaces.answers[("get_run", SOURCE)]["lineage"]["forks"] = forks


def _other_node(ctx: _Ctx) -> None:
    ctx.tracks[1].view["lineage"]["forkedFrom"]["nodeId"] = "charge"


def _no_provenance(ctx: _Ctx) -> None:
    ctx.surfaces.answers[("history", RETRY)] = [{"type": "run.forked", "data": {}}]


def _retry_failed(ctx: _Ctx) -> None:
    ctx.tracks[1].view.update(status="failed", error=ERROR, output=None)


def _wrong_output(ctx: _Ctx) -> None:
    ctx.tracks[1].view["output"] = {"prepared": 23 * X, "charged": 0}


def _carried_body_ran(ctx: _Ctx) -> None:
    body = _body("n3", RETRY, "charge")
    ctx.witnesses.bodies[body.nonce] = body
    ctx.witnesses.order.append(body.nonce)


def _charged_twice(ctx: _Ctx) -> None:
    """The charge not carried (say the fork point moved before it) and applied again."""
    _carried_body_ran(ctx)
    ctx.tracks[1].view["attempts"] = []


def _source_completed(ctx: _Ctx) -> None:
    ctx.tracks[0].view = {"status": "completed", "error": None}


def _source_changed(ctx: _Ctx) -> None:
    ctx.surfaces.answers[("get_run", SOURCE)]["status"] = "queued"


def _never_retried(ctx: _Ctx) -> None:
    ctx.tracks[1].run_id = None


Change = Callable[[_Ctx], None]


@pytest.mark.parametrize(
    ("change", "kind"),
    [
        (_same_run, "retrySameRun"),
        (_two_answers, "retryTwice"),
        (_two_forks, "retryTwice"),
        (_other_node, "retryLineage"),
        (_no_provenance, "retryProvenance"),
        (_retry_failed, "retryOutcome"),
        (_wrong_output, "output"),
        (_carried_body_ran, "retryReapplied"),
        (_charged_twice, "retryReapplied"),
        (_source_completed, "retrySource"),
        (_source_changed, "retrySource"),
        (_never_retried, "retryMissing"),
    ],
)
def test_each_broken_promise_of_a_retry_is_a_violation(
    tmp_path: Path, change: Change, kind: str
) -> None:
    """One change to the clean facts, and the oracle names it."""
    ctx = _facts(tmp_path)
    change(ctx)
    assert kind in _kinds(ctx)


def test_a_retry_cancelled_by_a_fault_only_promises_no_second_application(
    tmp_path: Path,
) -> None:
    """A `cancelRun` fault may cancel the retry: that is no violation, but an effect of the
    failed run applied again still is."""
    ctx = _facts(tmp_path)
    ctx.tracks[1].view.update(status="cancelled", output=None)
    ctx.tracks[1].cancel_sent = True
    assert _kinds(ctx) == []
    _carried_body_ran(ctx)
    assert _kinds(ctx) == ["retryReapplied"]
