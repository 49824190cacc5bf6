"""One test per reliability checklist scenario (research §7.2), named after it.

Every scenario must end with no duplicate and no lost line except those it declared in advance
(the copytruncate gap, a file rotated away and deleted while down), and those must be counted
under the declared reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import scenarios
from scenarios import SCENARIOS


@pytest.mark.parametrize("name", [n for n, _ in SCENARIOS])
def test_scenario(name: str, tmp_path: Path) -> None:
    run = dict(SCENARIOS)[name]
    result = run(tmp_path)
    assert (0, 0) == (result.duplicated, result.lost_silent), result


def test_lossless_scenarios_lose_nothing(tmp_path: Path) -> None:
    """Scenarios with no destroyed content deliver every line (not even a counted loss)."""
    for run in (scenarios.rename_rotation, scenarios.rotation_while_down,
                scenarios.crash_restart, scenarios.symlink_switch, scenarios.partial_line,
                scenarios.copytruncate):
        result = run(tmp_path / run.__name__)
        assert result.written == result.matched, result


def test_unavoidable_losses_are_counted(tmp_path: Path) -> None:
    """Bytes seen unread when a file was truncated with no copy next to it, and a file
    deleted while down, are lost, and said to be. (With logrotate's copy next to the file
    the copytruncate gap is read from it: ``copytruncate`` loses nothing.)"""
    for run in (scenarios.copytruncate_without_copy, scenarios.rotated_away_twice_while_down):
        result = run(tmp_path / run.__name__)
        assert result.lost_declared > 0, result


def test_scenario_inotify_watch_limit_falls_back_to_polling(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    """#27: ``max_user_watches`` exhausted. Simulated: watchdog's ``schedule`` raises ENOSPC
    (changing the sysctl needs root on the host). The hints report polling; tailing, driven by
    the timed poll, still reads every line once."""
    import errno
    import threading

    from harness import Harness, Writer
    from watchdog.observers import Observer

    from sigwatch.sources.discovery import ChangeHints

    def full(*_a: object, **_k: object) -> None:
        raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr(Observer, "schedule", full)
    hints = ChangeHints(threading.Event())
    assert "polling" == hints.start([(str(tmp_path), False)])
    h = Harness(tmp_path / "h")
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(20)
    h.settle()
    assert sorted(w.written) == sorted(h.seqs())
