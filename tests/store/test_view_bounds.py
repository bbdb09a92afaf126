"""The bounded forms of pushed views: cut texts, kept bodies, text slices, shortened lists."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pi_workflows.store import view_bounds
from pi_workflows.store.watch_views import bounded_run_view


@given(text=st.text(max_size=300), limit=st.integers(min_value=0, max_value=400))
def test_a_cut_text_is_a_prefix_at_a_character_boundary_with_the_whole_size(
    text: str, limit: int
) -> None:
    """``bounded_text`` keeps the longest whole-character prefix within ``limit`` bytes and
    says whether it cut and how long the whole text is."""
    cut = view_bounds.bounded_text(text, limit)
    data = text.encode()
    assert text.startswith(cut["text"])
    assert cut["textBytes"] == len(data)
    assert cut["textTruncated"] is (len(data) > limit)
    assert len(cut["text"].encode()) <= limit
    if cut["textTruncated"]:
        rest = text[len(cut["text"]) :]
        assert len(cut["text"].encode()) + len(rest[:1].encode()) > limit


@given(text=st.text(max_size=400), limit=st.integers(min_value=1, max_value=64))
def test_slices_from_offset_zero_rebuild_the_whole_text(text: str, limit: int) -> None:
    """Reading slices from 0, each from the previous ``next``, gives back the whole text."""
    parts = []
    offset: int | None = 0
    while offset is not None:
        part = view_bounds.text_slice(text, offset, limit)
        assert part["textBytes"] == len(text.encode())
        parts.append(part["text"])
        offset = part["next"]
    assert "".join(parts) == text


def test_a_slice_offset_inside_a_character_or_past_the_end_is_refused() -> None:
    """An offset that is not a character boundary within the text raises ``ValueError``."""
    with pytest.raises(ValueError, match="inside a character"):
        view_bounds.text_slice("é", 1)
    with pytest.raises(ValueError, match="outside"):
        view_bounds.text_slice("abc", 4)


def test_a_large_body_keeps_its_scalar_fields_and_the_size_it_left_out() -> None:
    """A body over the bound keeps its small scalar fields plus ``omittedBytes``."""
    body = {"runId": "run_1", "requestId": "req_1", "resumed": False, "choices": ["x" * 40_000]}
    kept = view_bounds.bounded_body(body)
    assert kept == {
        "runId": "run_1",
        "requestId": "req_1",
        "resumed": False,
        "omittedBytes": view_bounds.encoded_size(body),
    }
    small = {"runId": "run_1", "choices": ["a"]}
    assert view_bounds.bounded_body(small) is small


def _run_view(attempts: int, error_bytes: int) -> dict[str, Any]:
    return {
        "run": {
            "runId": "run_1",
            "messages": [{"workflowMessageId": f"m{i}", "text": "hi"} for i in range(3)],
            "attempts": [
                {"attemptId": f"a{i:04d}", "error": "e" * error_bytes} for i in range(attempts)
            ],
            "attemptsOmitted": 7,
            "effects": [],
            "effectsOmitted": 0,
            "waitingOn": {"requestId": "req_1", "request": {"prompt": "p" * 70_000}},
        },
        "graph": {"start": "a", "nodes": [], "edges": []},
    }


def test_a_run_view_over_the_budget_drops_its_oldest_items_and_counts_them() -> None:
    """The oldest attempts go (counted on top of those already omitted) until the view fits
    ``PUSH_BYTES``; the newest stay; a large request becomes its size."""
    view = _run_view(attempts=500, error_bytes=4000)
    bounded = bounded_run_view(view)
    run = bounded["run"]
    assert view_bounds.encoded_size(bounded) <= view_bounds.PUSH_BYTES
    kept = [a["attemptId"] for a in run["attempts"]]
    assert kept == [f"a{i:04d}" for i in range(500 - len(kept), 500)]
    assert run["attemptsOmitted"] == 7 + 500 - len(kept)
    assert len(run["messages"]) == 3
    assert run["messagesOmitted"] == 0
    assert run["waitingOn"]["request"] == {
        "omittedBytes": view_bounds.encoded_size({"prompt": "p" * 70_000})
    }
    assert bounded_run_view(view) == bounded  # deterministic: an unchanged view stays equal


def test_a_run_view_within_the_budget_is_unchanged_but_for_its_counter() -> None:
    """A small run view keeps every item; only ``messagesOmitted`` (0) is added."""
    view = _run_view(attempts=3, error_bytes=10)
    view["run"]["waitingOn"]["request"] = {"prompt": "short"}
    bounded = bounded_run_view(view)
    assert bounded["run"] == {**view["run"], "messagesOmitted": 0}
