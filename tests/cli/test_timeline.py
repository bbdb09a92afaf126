"""Following logs prints only what is new, once, as the byte counts grow; history lines
fit their width, date the days that are not today and say JSON details in words."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from pi_workflows.cli.timeline import HistoryFormat, LogFollower, event_detail, event_line, log_text

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
    line = event_line({"at": None, "revision": 7, "type": "node.logs", "nodeId": "build",
                       "actor": "client:py-0123456789abcdef", "detail": "12 bytes"})  # fmt: skip
    assert line.split()[1:4] == ["7", "node.logs", "build"]
    assert "client:py…" in line


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def test_history_dates_each_day_that_is_not_today() -> None:
    """Events of earlier days come after a line naming their date; today's need none."""
    today = dt.datetime(2026, 1, 31, 9, 15, 2).astimezone()
    events = [
        {"at": _ms(today - dt.timedelta(days=2)), "revision": 1, "type": "run.reserved",
         "nodeId": None, "actor": "client:cli", "detail": "run created"},
        {"at": _ms(today - dt.timedelta(days=2, seconds=-5)), "revision": 2,
         "type": "run.claimed", "nodeId": None, "actor": "server", "detail": "claimed to run"},
        {"at": _ms(today), "revision": 3, "type": "run.resumed", "nodeId": None,
         "actor": "client:cli", "detail": "queued again"},
    ]  # fmt: skip
    layout = HistoryFormat(events, 80, today=today.date())
    printed = [line for event in events for line in layout.lines(event)]
    assert printed == [
        "── 2026-01-29 ──",
        "09:15:02    1  run.reserved           -     client:cli  run created",
        "09:15:07    2  run.claimed            -     server      claimed to run",
        "── 2026-01-31 ──",
        "09:15:02    3  run.resumed            -     client:cli  queued again",
    ]
    again = HistoryFormat(events[2:], 80, today=today.date())
    assert again.lines(events[2])[0].startswith("09:15:02")  # today: no day line


def test_history_lines_fit_the_width_and_wrap_a_long_detail_under_its_column() -> None:
    """At 80 columns no line is longer; a long detail continues under the detail column."""
    event = {"at": None, "revision": 12, "type": "interaction.submitted",
             "nodeId": "a-node-with-a-rather-long-id", "actor": "client:py-0123456789",
             "detail": "x " * 60}  # fmt: skip
    layout = HistoryFormat([event], 80)
    lines = layout.lines(event)
    assert all(len(line) <= 80 for line in lines)
    start = layout.header().index("detail")
    assert len(lines) > 1
    assert all(line[:start].strip() == "" for line in lines[1:])
    assert " ".join(line[start:] for line in lines).split() == ["x"] * 60
    assert "a-node-with…" in lines[0]


@pytest.mark.parametrize(
    ("event", "detail"),
    [
        ({"type": "interaction.submitted", "detail": '{"requestId":"req_1"}',
          "data": {"requestId": "req_1"}}, "answer submitted, validating"),
        ({"type": "interaction.rejected", "detail": '{"submissionId":"sub_1"}',
          "data": {"submissionId": "sub_1"}}, "submission rejected by its validation"),
        ({"type": "some.future", "detail": '{"effectType":"x","count":2}',
          "data": {"effectType": "x", "count": 2}}, "effect type x, count 2"),
        ({"type": "node.started", "detail": "started", "data": {}}, "started"),
    ],
)  # fmt: skip
def test_a_json_detail_is_said_in_words(event: dict[str, Any], detail: str) -> None:
    """The server's JSON detail becomes a short phrase; a worded detail is kept."""
    assert event_detail(event) == detail
