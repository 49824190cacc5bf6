"""``parse_timestamp``: the time a line starts with, in each form seen on training nodes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

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
