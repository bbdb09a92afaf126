"""Following logs prints only what is new, once, as the byte counts grow."""

from __future__ import annotations

from typing import Any

import pytest

from pi_workflows.cli.timeline import LogFollower, event_line, log_text

pytestmark = pytest.mark.timeout(30)


def _log(text: str, total: int, attempt: str = "att_1") -> dict[str, Any]:
    return {"attemptId": attempt, "nodeId": "build", "visit": 1, "attemptNo": 1,
            "text": text, "totalBytes": total, "keptBytes": len(text.encode())}  # fmt: skip


def test_a_follower_prints_each_new_part_once() -> None:
    """Repeated answers print only their new suffix; a line split across answers stays one."""
    printed: list[str] = []
    follower = LogFollower(printed.append)
    follower.update([_log("one\ntw", 6)])
    follower.update([_log("one\ntw", 6)])
    follower.update([_log("one\ntwo\n", 8), _log("x\n", 2, "att_2")])
    follower.close()
    assert "".join(printed) == (
        "── node build · visit 1 ──\none\ntwo\n── node build · visit 1 ──\nx\n"
    )


def test_a_follower_says_when_output_went_past_the_kept_tail() -> None:
    """When more arrived than the server kept, the gap is named, not invented."""
    printed: list[str] = []
    follower = LogFollower(printed.append)
    follower.update([_log("tail\n", 1000)])
    assert "… 995 bytes not kept\n" in printed
    assert printed[-1] == "tail\n"


def test_log_text_and_event_lines() -> None:
    """The truncation note and a traceback not already in the text are shown."""
    text = log_text({**_log("end\n", 70_000), "truncated": True, "traceback": "Boom"})
    assert text == "… 69,996 earlier bytes not kept (the newest 64 KiB are)\nend\nBoom"
    line = event_line({"at": 0, "revision": 7, "type": "node.logs", "nodeId": "build",
                       "actor": "client:py-0123456789abcdef", "detail": "12 bytes"})  # fmt: skip
    assert line.split()[1:4] == ["7", "node.logs", "build"]
    assert "client:py-01234…" in line
