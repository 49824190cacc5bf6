"""The hostile suite's rig: real ``sigwatch run`` processes on real files in tmp.

(A module of its own, not the suite's conftest: a test that imported ``conftest`` got whichever
suite's conftest came first on ``sys.path`` when two suites ran in one pytest call.)

Every experiment writes numbered ``ERROR seq=<n>`` lines (the signature in
``reliability/harness.py``) and checks the event log for exactly the seqs that may be there.
Daemons are stopped by PID at the end (SIGTERM, then SIGKILL after a few seconds: a daemon that
hangs must not cost the suite more than that).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.daemon import DaemonProcess, free_port, scrape, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))

from harness import read_event_seqs, write_patterns  # noqa: E402


def metric(port: int, name: str, **labels: str) -> float | None:
    """The sum of the samples of ``name`` whose labels include ``labels`` (None: no sample)."""
    text = scrape(port)
    if not text:
        return None
    total: float | None = None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and set(labels.items()) <= set(s.labels.items()):
                total = (total or 0.0) + s.value
    return total


class Running:
    """One daemon process and its metrics port."""

    def __init__(self, proc: DaemonProcess, port: int) -> None:
        self.d = proc
        self.port = port

    @property
    def pid(self) -> int:
        return self.d.proc.pid

    def alive(self) -> bool:
        return self.d.proc.poll() is None

    def metric(self, name: str, **labels: str) -> float | None:
        return metric(self.port, name, **labels)

    def wait_started(self, timeout: float = 120.0) -> None:
        def started() -> bool:
            if not self.alive():
                pytest.fail(f"daemon exited ({self.d.proc.returncode}): {self.d.stderr()[-2000:]}")
            value = self.metric("sigwatch_checkpoint_writes_total")
            return value is not None and value >= 1
        wait_for(started, timeout=timeout, what="the daemon's first checkpoint")

    def kill(self) -> None:
        self.d.proc.send_signal(signal.SIGKILL)
        self.d.proc.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status of the SIGTERM
        (None when it had to be killed)."""
        proc = self.d.proc
        if proc.poll() is not None:
            return proc.returncode
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None

    def stderr(self) -> str:
        return self.d.stderr()


class Rig:
    """A watched folder, patterns, a state folder and an event log under tmp."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs = root / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.patterns = write_patterns(root)
        self.state = root / "state"
        self.events = root / "events.jsonl"
        self.running: list[Running] = []

    def start(self, *extra: str, watch: str | None = None, events: Path | None = None,
              state: Path | None = None, env: dict[str, str] | None = None,
              config: str | None = None, patterns: Path | None = None) -> Running:
        port = free_port()
        args = ["--watch", watch or str(self.logs / "*.log"),
                "--events", str(events or self.events),
                "--listen", f"127.0.0.1:{port}", "--state-dir", str(state or self.state),
                "--patterns", str(patterns or self.patterns), "--start-at", "beginning",
                "--no-console", *extra]
        if config is not None:
            cfg = self.root / f"config{len(self.running)}.toml"
            cfg.write_text(config, encoding="utf-8")
            args += ["--config", str(cfg)]
        proc = DaemonProcess(args, self.root / f"daemon{len(self.running)}.stderr", env=env)
        run = Running(proc, port)
        self.running.append(run)
        return run

    def seqs(self, *paths: Path) -> list[int]:
        out: list[int] = []
        for path in paths or (self.events,):
            out += read_event_seqs(path)
        return out

    def wait_seqs(self, expected: Iterable[int], *paths: Path, timeout: float = 60.0,
                  daemon: Running | None = None) -> list[int]:
        want = set(expected)

        def done() -> bool:
            if daemon is not None and not daemon.alive():
                pytest.fail(f"daemon exited ({daemon.d.proc.returncode}): "
                            f"{daemon.stderr()[-2000:]}")
            return want <= set(self.seqs(*paths))
        wait_for(done, timeout=timeout,
                 what=f"{len(want)} seqs (missing {sorted(want - set(self.seqs(*paths)))[:10]})")
        return self.seqs(*paths)


def write_lines(path: Path | bytes, seqs: Iterable[int], mode: str = "ab") -> list[int]:
    out = list(seqs)
    with open(path, mode) as fh:
        fh.write(b"".join(f"ERROR seq={s} payload\nINFO filler {s}\n".encode() for s in out))
    return out


def dup(seqs: Iterable[int]) -> dict[int, int]:
    return {s: c for s, c in Counter(seqs).items() if c > 1}


def events_json_errors(path: Path) -> int:
    """Lines of an event log that are not whole JSON objects."""
    bad = 0
    for raw in path.read_bytes().splitlines() if path.exists() else []:
        try:
            json.loads(raw)
        except ValueError:
            bad += 1
    return bad


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def monotonic() -> float:
    return time.monotonic()
