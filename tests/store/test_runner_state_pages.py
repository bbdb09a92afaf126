"""A runner's state is read in pages that each fit a frame, whatever the outputs hold."""

from __future__ import annotations

from pathlib import Path

from pi_workflows.protocol import MAX_FRAME_BYTES, encode_frame
from pi_workflows.store import lifecycle, views
from pi_workflows.store.lifecycle import GoTo
from pi_workflows.store.states import AttemptStatus

from support.store import open_test_db, running

WIDE = "😀" * 1000  # 1,000 characters, 4,000 bytes of UTF-8: well under the inline limit


def test_pages_of_multibyte_outputs_fit_a_frame_and_together_hold_every_output(
    tmp_path: Path,
) -> None:
    """300 settled nodes of 4 KB each (1.2 MB, counted in bytes, not characters) come in
    pages under a frame, in node order, with every node's latest output exactly once."""
    db = open_test_db(tmp_path / "state")
    claim = running(db)
    names = [f"node-{i:03d}" for i in range(300)]
    attempt = lifecycle.start_node(db, claim, names[0]).attempt
    for index, name in enumerate(names):
        following = names[index + 1] if index + 1 < len(names) else name
        finished = lifecycle.finish_node(
            db, claim, attempt.attempt_id, AttemptStatus.COMPLETED, GoTo(following),
            output={"who": name, "fill": WIDE}, start_next=index + 1 < len(names),
        )  # fmt: skip
        if finished.next_attempt is not None:
            attempt = finished.next_attempt
    with db.read() as conn:
        state = views.runner_state(conn, claim.run_id)
        pages = [state]
        while pages[-1]["moreOutputs"] is not None:
            pages.append(views.runner_outputs(conn, claim.run_id, pages[-1]["moreOutputs"]))
    assert len(pages) > 1
    for page in pages:
        assert len(encode_frame(page)) < MAX_FRAME_BYTES // 2
        assert page["revision"] == state["revision"]
    seen = [node for page in pages for node in page["outputs"]]
    assert seen == names
    assert all(
        page["outputs"][n] == {"who": n, "fill": WIDE} for page in pages for n in page["outputs"]
    )
