"""The tests' reader of a running daemon's event log reads only the lines it finished."""

from __future__ import annotations

from pathlib import Path

from support.daemon import whole_jsonl


def test_a_half_written_last_line_is_left_for_the_next_read(tmp_path: Path) -> None:
    """A busy machine shows the daemon's write half done (a CI run failed on it)."""
    events = tmp_path / "events.jsonl"
    events.write_text('{"signature": "a"}\n{"signature": "b", "remedi')

    assert [{"signature": "a"}] == whole_jsonl(events)


def test_no_file_yet_is_no_event(tmp_path: Path) -> None:
    assert [] == whole_jsonl(tmp_path / "events.jsonl")
