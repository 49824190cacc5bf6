"""The process on a hostile machine: hostile user patterns, a flood of new files, a huge
reload. Real ``sigwatch run`` processes; the watchdog is observed through a real
``NOTIFY_SOCKET``. (SIGHUP during start-up, case 14, is in ``test_hostile_startup.py``.)"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from harness import HOSTILE_SIGNATURE
from support.daemon import wait_for
from support.hostile import Rig, dup, write_lines

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

NESTED = """\
id = "test_nested_quantifier"
title = "Test Nested Quantifier"
severity = "warning"
[match]
regex = 'jobfail (\\w+\\s?)+:'
"""


def _hostile_patterns(rig: Rig) -> Path:
    folder = rig.patterns / "test"
    (folder / "test_nested_quantifier.toml").write_text(NESTED, encoding="utf-8")
    (folder / "test_hostile_backtrack.toml").write_text(HOSTILE_SIGNATURE, encoding="utf-8")
    return rig.patterns


def test_a_pattern_whose_prefilter_form_backtracks_neither_freezes_nor_passes_lint(
        rig: Rig) -> None:
    """Case 6. ``jobfail (\\w+\\s?)+:`` is harmless for ``regex`` but its relaxed prefilter form
    ran in ``re`` without a bound: one line ``jobfail aaa…a!`` froze the daemon for minutes.
    Now a relaxed form that could backtrack is never run unbounded (the step runs under the
    ``regex`` timeout instead), a call that hits the bound is counted and the line still goes
    through the other signatures, and ``patterns lint`` rejects the pattern. Nothing may be
    lost: every ``ERROR seq`` line is detected within 15 s."""
    _hostile_patterns(rig)
    d = rig.start()
    d.wait_started()
    with open(rig.logs / "app.log", "ab") as fh:
        fh.write(b"jobfail " + b"a" * 40 + b"! ERROR seq=1 payload\n")
        fh.write(b"a" * 60 + b"! ERROR seq=2 payload\n")
    written = [1, 2, *write_lines(rig.logs / "app.log", range(3, 21))]
    got = rig.wait_seqs(written, daemon=d, timeout=120)
    assert {} == dup(got)
    assert (d.metric("sigwatch_regex_timeouts_total",
                     signature="test_hostile_backtrack") or 0) >= 1
    lint = subprocess.run([sys.executable, "-m", "sigwatch", "patterns", "lint", "--relaxed",
                           "--patterns", str(rig.patterns)], capture_output=True, text=True,
                          check=False, timeout=120)
    assert 1 == lint.returncode, lint.stdout
    assert "test_nested_quantifier.toml: match.regex:" in lint.stdout
    assert "[P006]" in lint.stdout


class Notifications:
    """A NOTIFY_SOCKET the daemon reports to; records when each WATCHDOG=1 arrived."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.pings: list[float] = []
        self.reloading: list[float] = []  # when RELOADING=1 arrived
        self.readies: list[float] = []  # when READY=1 arrived
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except (TimeoutError, OSError):
                continue
            now = time.monotonic()
            for msg in data.decode().split("\n"):
                if msg == "WATCHDOG=1":
                    self.pings.append(now)
                elif msg == "RELOADING=1":
                    self.reloading.append(now)
                elif msg == "READY=1":
                    self.readies.append(now)
                    self.ready.set()

    def max_gap(self, since: float, until: float) -> float:
        times = [since, *[t for t in self.pings if since <= t <= until], until]
        return max(b - a for a, b in zip(times, times[1:]))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _watchdog_sec() -> float:
    """``WatchdogSec`` of the shipped unit: systemd restarts a daemon silent that long."""
    unit = (REPO / "systemd" / "sigwatch.service").read_text(encoding="utf-8")
    return float(next(line.split("=", 1)[1] for line in unit.splitlines()
                      if line.startswith("WatchdogSec=")))


@pytest.mark.slow
def test_six_thousand_new_files_at_once_keep_the_watchdog_fed(rig: Rig) -> None:
    """Case 13a, scaled down to 6,000 files (the issue's 10,000 is measured by
    ``bench/hostile_watchdog.py``). Before: adoption compared each new file with every open
    stream and listed its folder once per file (O(n²)): the watchdog went unfed for about
    40 s at 6,000 files (111.6 s at 10,000), and systemd, which restarts a daemon silent for
    ``WatchdogSec``, would have killed it. Now adoption is O(new files) and the scan feeds
    the watchdog. The bound is the requirement, half the shipped ``WatchdogSec`` (30 s), not
    a speed: the gap is about 3 s on an idle 2-core machine and stays far below the bound
    with both cores busy (it was once held to 2 s, which a busy machine exceeds). Nothing
    may be lost."""
    notes = Notifications(rig.root / "notify.sock")
    try:
        d = rig.start(env={"NOTIFY_SOCKET": str(notes.path)})
        assert notes.ready.wait(120)
        d.wait_started()
        since = time.monotonic()
        for i in range(6000):
            write_lines(rig.logs / f"job{i:05d}.log", [i + 1])
        got = rig.wait_seqs(range(1, 6001), daemon=d, timeout=600)
        until = time.monotonic()
        assert {} == dup(got)
        gap = notes.max_gap(since, until)
        print(f"6,000 new files: longest watchdog gap {gap:.2f} s, all read in "
              f"{until - since:.1f} s")
        assert gap < _watchdog_sec() / 2
    finally:
        notes.close()


def _many_patterns(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"gen_sig_{i:05d}.toml").write_text(
            f'id = "gen_sig_{i:05d}"\ntitle = "Gen Sig {i}"\nseverity = "warning"\n'
            f"[match]\nregex = 'gen(?:erated)? failure {i:05d} in (?P<unit>\\w+) at "
            f"[0-9a-f]{{8}}'\n", encoding="utf-8")


@pytest.mark.slow
def test_a_very_large_reload_keeps_the_watchdog_fed(rig: Rig) -> None:
    """Case 13b, scaled down to 1,500 generated signatures. Before: the reload ran on the pump
    thread and the watchdog went unfed while it compiled (77 s for the issue's reload): no
    WATCHDOG=1 between the daemon's RELOADING=1 and READY=1. Now the set is loaded on a worker
    thread and swapped in by the pump when ready: the pump feeds the watchdog while it
    compiles (the test counts the pings between the two notifications, an order of events,
    not a speed; it once held the gap to 2 s, which a busy machine exceeds), and lines
    written during the reload are read once."""
    notes = Notifications(rig.root / "notify.sock")
    try:
        d = rig.start(env={"NOTIFY_SOCKET": str(notes.path)})
        assert notes.ready.wait(120)
        d.wait_started()
        _many_patterns(rig.patterns / "gen", 1500)
        since = time.monotonic()
        d.d.signal(signal.SIGHUP)
        written = write_lines(rig.logs / "app.log", range(1, 51))
        wait_for(lambda: d.metric("sigwatch_patterns_loaded") == 1501, timeout=180,
                 what="the reload")
        got = rig.wait_seqs(written, daemon=d)
        until = time.monotonic()
        assert {} == dup(got)
        gap = notes.max_gap(since, until)
        started = next(t for t in notes.reloading if t >= since)
        done = next(t for t in notes.readies if t >= started)
        fed = [t for t in notes.pings if started < t < done]
        print(f"reload of 1,500 signatures: longest watchdog gap {gap:.2f} s, "
              f"{len(fed)} watchdog pings during the {done - started:.1f} s compile")
        assert len(fed) >= 2
    finally:
        notes.close()
