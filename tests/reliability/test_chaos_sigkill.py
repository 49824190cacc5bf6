"""Process-level chaos: the real ``sigwatch run``, a writer process rotating by rename, and
SIGKILL of the daemon at random moments (at least 20 times). At the end the event log must
hold every numbered ERROR line exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import duplicates, read_event_seqs, start_daemon_process, write_patterns

KILLS = 30


@pytest.mark.integration
@pytest.mark.slow
def test_sigkill_chaos_exactly_once(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    write_patterns(tmp_path)
    total = 9000
    rng = random.Random(int(os.environ.get("CHAOS_SEED", "1234")))
    writer = subprocess.Popen([sys.executable, str(Path(__file__).with_name("writer_proc.py")),
                               str(tmp_path / "logs"), str(total), "400", "0.15"],
                              stdout=subprocess.PIPE)
    kills = 0
    started = time.monotonic()
    daemon = start_daemon_process(tmp_path)
    try:
        while kills < KILLS:
            try:  # a random run time; also notices a daemon that died on its own
                daemon.wait(timeout=rng.uniform(0.2, 1.5))
                pytest.fail(f"daemon exited by itself: {daemon.returncode}")
            except subprocess.TimeoutExpired:
                pass
            daemon.send_signal(signal.SIGKILL)
            daemon.wait(timeout=10)
            kills += 1
            log = tmp_path / "daemon.log"
            listening_before = log.read_bytes().count(b"http_listening")
            daemon = start_daemon_process(tmp_path)
        assert writer.wait(timeout=120) == 0
        events = tmp_path / "events.jsonl"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(set(read_event_seqs(events))) < total:
            try:
                daemon.wait(timeout=0.2)
                pytest.fail("daemon exited by itself")
            except subprocess.TimeoutExpired:
                pass
        while time.monotonic() < deadline and \
                log.read_bytes().count(b"http_listening") <= listening_before:
            daemon.wait(timeout=0.05) if daemon.poll() is not None else time.sleep(0.05)
        daemon.send_signal(signal.SIGTERM)  # handlers are installed by now
        assert daemon.wait(timeout=20) == 0
    finally:
        for proc in (daemon, writer):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    got = read_event_seqs(tmp_path / "events.jsonl")
    print("rolled back:", (tmp_path / "daemon.log").read_bytes().count(b"event_log_rolled_back"),
          "kills:", kills, "elapsed:", round(time.monotonic() - started, 1))
    assert {} == duplicates(got)
    assert set(range(1, total + 1)) == set(got), f"missing {sorted(set(range(1, total + 1)) - set(got))[:20]}"
    assert kills >= 20
