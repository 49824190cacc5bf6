"""``parse_timestamp``: the time a line starts with, in each form seen on training nodes."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from sigwatch.framing import timestamps
from sigwatch.framing.timestamps import match_timestamp, parse_timestamp

AT = datetime(2024, 11, 20, 10, 2, 11, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("text", "expected"), [
    ("2024-11-20T10:02:11Z rest", AT),
    ("2024-11-20T10:02:11.123456Z", AT + 0.123456),
    ("2024-11-20 10:02:11,500 INFO x", AT + 0.5),                   # Python logging
    ("2024-11-20T11:02:11+01:00 x", AT),                            # offset
    ("2024-11-20T05:02:11-0500 x", AT),
    ("2024-11-20T10:02:11.123456789Z stdout F msg", AT + 0.123456789),  # CRI RFC3339Nano
    ("I1120 10:02:11.000 main.cc:1] x", AT),                        # glog/absl, no year
    ("W1120 10:02:11.250000 x", AT + 0.25),
    ("Nov 20 10:02:11 host kernel: x", AT),                          # syslog, no year
    ("Nov  2 10:02:11 host x", AT - timedelta(days=18).total_seconds()),
    ("  2024-11-20T10:02:11Z leading blanks", AT),
])
def test_each_form_gives_the_epoch_time(text: str, expected: float) -> None:
    assert expected == pytest.approx(parse_timestamp(text, 2024, tz=UTC), abs=1e-6)


def test_a_naive_time_is_read_in_the_given_zone() -> None:
    tz = timezone(timedelta(hours=2))

    assert AT - 7200 == parse_timestamp("2024-11-20 10:02:11 x", tz=tz)


def test_the_kernel_relative_stamp_needs_the_boot_time() -> None:
    assert parse_timestamp("[  123.456789] NVRM: Xid") is None
    assert 1000.0 + 123.456789 == pytest.approx(
        parse_timestamp("[  123.456789] NVRM: Xid", boot_time=1000.0))


@pytest.mark.parametrize("text", [
    "step 2024-11-20T10:02:11Z quoted in the middle",
    "2024-13-20T10:02:11Z month 13",
    "2024-11-20T25:02:11Z hour 25",
    "Nov 31 10:02:11 no such day",
    "2024-11-20T10:02:113 glued digits",
    "I1120 10:02 short",
    "12:30:45 time only",
    "[123] not a kernel stamp",
    "Information: not glog",
])
def test_near_misses_are_not_timestamps(text: str) -> None:
    assert parse_timestamp(text, 2024, tz=UTC) is None


def test_the_match_says_where_the_text_continues_and_the_glog_level() -> None:
    found = match_timestamp("E1120 10:02:11.000001 1 x.cc:2] boom", 0, 2024, tz=UTC)

    assert found is not None
    assert (21, "glog", "error") == (found.end, found.form, found.level)


class _ReadAt:
    """``time`` for the parser: the moment a line is read (the module's only use of it)."""

    def __init__(self, when: datetime) -> None:
        self._now = when.timestamp()

    def time(self) -> float:
        return self._now

    @staticmethod
    def localtime(secs: float | None = None) -> time.struct_time:
        return time.gmtime(secs)


class TestAStampWithoutAYear:
    """glog and syslog stamps carry no year: this year, unless that is more than a day ahead
    of now (then it was written last year: ``E1231 23:59:59`` read on 1 January)."""

    @pytest.mark.parametrize(("read_at", "text", "expected"), [
        (datetime(2027, 1, 1, 0, 5, tzinfo=UTC), "E1231 23:59:59.000000 1 x.cc:1] boom",
         datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)),
        (datetime(2027, 1, 1, 0, 5, tzinfo=UTC), "Dec 31 23:59:59 host kernel: x",
         datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC)),
        (datetime(2027, 1, 1, 0, 5, tzinfo=UTC), "E0101 00:04:00.000000 1 x.cc:1] boom",
         datetime(2027, 1, 1, 0, 4, tzinfo=UTC)),
        (datetime(2027, 6, 1, 12, 0, tzinfo=UTC), "E0601 15:00:00.000000 1 x.cc:1] boom",
         datetime(2027, 6, 1, 15, 0, tzinfo=UTC)),
    ], ids=["glog-new-year", "syslog-new-year", "glog-this-year", "a-node-clock-hours-ahead"])
    def test_is_placed_in_the_year_that_does_not_put_it_far_ahead(
            self, monkeypatch: pytest.MonkeyPatch, read_at: datetime, text: str,
            expected: datetime) -> None:
        monkeypatch.setattr(timestamps, "time_mod", _ReadAt(read_at))

        assert expected.timestamp() == parse_timestamp(text, tz=UTC)

    def test_a_given_year_is_kept(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(timestamps, "time_mod", _ReadAt(datetime(2027, 1, 1, tzinfo=UTC)))

        assert datetime(2027, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp() == parse_timestamp(
            "E1231 23:59:59.000000 1 x.cc:1] boom", 2027, tz=UTC)
