"""A sink that hangs must not hold up reading, the other sinks, or the systemd watchdog."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import wait_for

from sigwatch.app import build_daemon
from sigwatch.config import Config, SourceConfig
from sigwatch.model import Detection

INCIDENT = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"


class HangingSink:
    """Blocks in ``emit`` until released: an Alertmanager that never answers."""

    name = "hanging"

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def emit(self, detection: Detection) -> None:
        _ = detection
        self.entered.set()
        self.release.wait()

    def flush(self) -> None:
        return None

    def tick(self, now: float) -> None:
        _ = now

    def close(self) -> None:
        return None


@pytest.fixture(name="notify_socket")
def _notify_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()


def _events(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_a_hanging_sink_delays_neither_other_sinks_nor_the_watchdog(
        tmp_path: Path, notify_socket: socket.socket) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    events = tmp_path / "events.jsonl"
    config = Config(sources=[SourceConfig(name="job", paths=[str(logs / "*.log")],
                                          start_at="beginning")],
                    state_dir=tmp_path / "state", events=events, listen="127.0.0.1:0",
                    console=False, poll_interval=0.05, rescan_interval=0.05)
    hanging = HangingSink()
    daemon = build_daemon(config, extra_sinks=[hanging])
    runner = threading.Thread(target=daemon.run)
    runner.start()
    try:
        assert daemon.ready.wait(10)
        with open(logs / "a.log", "ab") as fh:
            fh.write(INCIDENT)
        assert hanging.entered.wait(10), "the hanging sink never got the detection"
        wait_for(lambda: _events(events) >= 1, what="the event log despite the hung sink")

        with open(logs / "a.log", "ab") as fh:
            fh.write(INCIDENT)
        wait_for(lambda: _events(events) >= 2, what="a second detection while still hung")
        pings = 0
        while pings < 3:
            if notify_socket.recv(256) == b"WATCHDOG=1":
                pings += 1
        detections = daemon.metrics.detections.labels(
            "cuda_illegal_memory_access", "error", "job")._value.get()  # noqa: SLF001
        assert 2 == detections
        assert not hanging.release.is_set()
    finally:
        hanging.release.set()
        daemon.request_stop()
        runner.join(20)
    assert not runner.is_alive()
