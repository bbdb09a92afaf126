"""When a schedule fires: durations, cron expressions across daylight-saving changes, zones,
and the due times after downtime (``store/schedule_times.py``), as pure functions."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from pi_workflows.store.errors import InvalidScheduleError
from pi_workflows.store.schedule_times import (
    Cadence,
    check_cron,
    format_every,
    local_zone_name,
    parse_every,
    zone,
)

pytestmark = pytest.mark.timeout(30)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def _ms(zone_info: ZoneInfo, *parts: int) -> int:
    return int(dt.datetime(*parts, tzinfo=zone_info).timestamp() * 1000)  # type: ignore[misc]


def _local(zone_info: ZoneInfo, ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=zone_info).isoformat()


def _fires(cadence: Cadence, start: int, count: int) -> list[int]:
    found, moment = [], start
    for _ in range(count):
        following = cadence.next_after(moment)
        assert following is not None
        found.append(following)
        moment = following
    return found


@pytest.mark.parametrize(
    ("text", "ms"),
    [("30s", 30_000), ("5m", 300_000), ("1h30m", 5_400_000), ("2d", 172_800_000),
     ("1d2h3m4s", 93_784_000), ("1s", 1000), ("366d", 366 * 86_400_000), (" 90M ", 5_400_000)],
)  # fmt: skip
def test_the_every_grammar_reads_units_in_order(text: str, ms: int) -> None:
    """Whole numbers with d, h, m and s in that order make a duration in milliseconds."""
    assert parse_every(text) == ms


@pytest.mark.parametrize("text", ["", "5", "5x", "1m1h", "1.5h", "-5m", "0s", "999ms", "367d",
                                  "5 m", "h", "1h 30m", "9" * 50 + "s"])  # fmt: skip
def test_a_bad_duration_is_refused_naming_it_and_the_accepted_form(text: str) -> None:
    """Anything else is refused with one line that names the value and the grammar."""
    with pytest.raises(InvalidScheduleError) as refused:
        parse_every(text)
    message = str(refused.value)
    assert "\n" not in message
    assert "--every" in message
    assert "30s, 5m, 1h30m or 2d" in message
    assert refused.value.field == "every"


def test_a_duration_prints_back_in_its_grammar() -> None:
    """``format_every`` is the inverse of ``parse_every`` for normalised durations."""
    for text in ("30s", "5m", "1h30m", "2d", "1d2h3m4s"):
        assert format_every(parse_every(text)) == text


def test_a_daily_cron_stays_at_its_local_time_when_clocks_go_forward() -> None:
    """A daily 02:30 in Berlin fires at 03:00 on the day 02:30 does not exist (the last
    Sunday of March), then at 02:30 local time again, an hour less of UTC apart."""
    cadence = Cadence(None, "30 2 * * *", "Europe/Berlin", 0)
    fires = _fires(cadence, _ms(BERLIN, 2026, 3, 27, 12, 0), 4)
    assert [_local(BERLIN, f) for f in fires] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_a_daily_cron_fires_once_when_its_time_occurs_twice() -> None:
    """On the day clocks go back (last Sunday of October) 02:30 happens twice; the schedule
    fires once, at the first, and keeps 02:30 local time after."""
    cadence = Cadence(None, "30 2 * * *", "Europe/Berlin", 0)
    fires = _fires(cadence, _ms(BERLIN, 2026, 10, 23, 12, 0), 4)
    assert [_local(BERLIN, f) for f in fires] == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
        "2026-10-27T02:30:00+01:00",
    ]
    assert fires[2] - fires[1] == 25 * 3_600_000  # the day with the extra hour


def test_a_half_hourly_cron_fires_at_every_real_instant_across_the_fall_back_hour() -> None:
    """``*/30`` fires every 30 minutes of real time through the repeated hour in New York
    (first Sunday of November): no instant twice, none left out."""
    cadence = Cadence(None, "*/30 * * * *", "America/New_York", 0)
    fires = _fires(cadence, _ms(NEW_YORK, 2026, 10, 31, 23, 59), 8)
    assert fires[0] == _ms(NEW_YORK, 2026, 11, 1, 0, 0)
    assert all(b - a == 1_800_000 for a, b in itertools.pairwise(fires))
    assert _local(NEW_YORK, fires[3]) == "2026-11-01T01:30:00-04:00"
    assert _local(NEW_YORK, fires[5]) == "2026-11-01T01:30:00-05:00"


def test_a_weekday_cron_skips_the_weekend_in_its_zone() -> None:
    """``0 9 * * 1-5`` read in Berlin fires at 09:00 Berlin time on weekdays only."""
    cadence = Cadence(None, "0 9 * * 1-5", "Europe/Berlin", 0)
    fires = _fires(cadence, _ms(BERLIN, 2026, 5, 1, 10, 0), 3)  # a Friday
    assert [_local(BERLIN, f) for f in fires] == [
        "2026-05-04T09:00:00+02:00",
        "2026-05-05T09:00:00+02:00",
        "2026-05-06T09:00:00+02:00",
    ]


def test_an_every_cadence_counts_from_its_anchor() -> None:
    """Fire times are anchor + k * every for k >= 1; ``next_after`` is strictly after."""
    cadence = Cadence(1000, None, "UTC", 10_000)
    assert cadence.next_after(0) == 11_000
    assert cadence.next_after(11_000) == 12_000
    assert cadence.next_after(11_999) == 12_000
    assert cadence.latest_until(14_500, 3) == [12_000, 13_000, 14_000]
    assert cadence.latest_until(11_500, 3) == [11_000]
    assert cadence.count_due(11_000, 14_500) == (4, True)


def test_due_cron_times_are_counted_and_listed_newest_last() -> None:
    """After downtime the due cron times between two moments are counted (exactly, up to
    the limit) and the newest can be listed, oldest first."""
    cadence = Cadence(None, "*/15 * * * *", "UTC", 0)
    start = _ms(ZoneInfo("UTC"), 2026, 1, 1, 0, 0)
    now = start + 2 * 3_600_000 + 60_000
    assert cadence.count_due(start, now) == (9, True)
    assert cadence.latest_until(now, 2) == [start + 105 * 60_000, start + 120 * 60_000]
    assert cadence.count_due(start, start + 30 * 86_400_000)[1] is False  # past the limit


@pytest.mark.parametrize(
    "expr", ["", "* * * *", "* * * * * *", "61 * * * *", "* 24 * * *", "0 0 31 4 *", "@daily",
             "0 0 * * MON-XYZ", "x" * 300, "0 0 * *\t*\n"],
)  # fmt: skip
def test_a_bad_cron_expression_is_refused_naming_it_and_the_form(expr: str) -> None:
    """Not five valid fields (or never firing) is refused with one line naming the value."""
    with pytest.raises(InvalidScheduleError) as refused:
        check_cron(expr, "UTC", 1_800_000_000_000)
    message = str(refused.value)
    assert "\n" not in message
    assert "--cron" in message
    assert "five fields" in message


def test_a_valid_cron_expression_is_normalised_to_single_spaces() -> None:
    """Extra spaces between fields are dropped; names are accepted."""
    assert check_cron(" 0  9 * * MON-FRI ", "Europe/Berlin", 0) == "0 9 * * MON-FRI"


@pytest.mark.parametrize("name", ["Mars/Base", "", "../etc/passwd", "/usr/share/zoneinfo/UTC",
                                  "localtime", "Europe/Berlin\n", "a" * 100])  # fmt: skip
def test_a_bad_time_zone_is_refused_naming_it(name: str) -> None:
    """Only IANA zone names are accepted; one line names the value and the form."""
    with pytest.raises(InvalidScheduleError) as refused:
        zone(name)
    assert "--timezone" in str(refused.value)
    assert "IANA" in str(refused.value)


def test_the_local_zone_comes_from_tz_then_etc_timezone_then_localtime(tmp_path: Path) -> None:
    """``$TZ`` wins when it names a zone, then ``/etc/timezone``, then the target of
    ``/etc/localtime``; none of them naming a zone is UTC."""
    (tmp_path / "etc").mkdir()
    assert local_zone_name({}, tmp_path) == "UTC"
    (tmp_path / "etc" / "localtime").symlink_to("/usr/share/zoneinfo/Asia/Tokyo")
    assert local_zone_name({}, tmp_path) == "Asia/Tokyo"
    (tmp_path / "etc" / "timezone").write_text("Europe/Paris\n")
    assert local_zone_name({"TZ": "nonsense"}, tmp_path) == "Europe/Paris"
    assert local_zone_name({"TZ": ":America/Chicago"}, tmp_path) == "America/Chicago"
