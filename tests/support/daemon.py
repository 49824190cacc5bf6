"""Helpers to run the real `sigwatch run` process and wait on conditions.

Tests wait on a condition with a deadline; they never sleep for a fixed time and hope.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port free now and not handed out before in this process: each port is
    released when chosen, so two choices in a row (a replica's web port and another's gossip
    port) could otherwise be the same number and the second server fail to bind."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def free_gossip_port() -> int:
    """A loopback port free for both TCP and UDP: memberlist (Alertmanager's cluster) binds
    both, and a port free only for TCP can leave a replica unable to gossip."""
    while True:
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            try:
                udp.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def wait_for(condition: Callable[[], object], timeout: float = 60.0, what: str = "") -> object:
    """Poll ``condition`` until it is truthy; fail after ``timeout`` seconds (a generous
    bound: a busy 2-core machine takes seconds for what takes milliseconds when idle)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.01)


def whole_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a running daemon has finished writing to ``path`` ([] before it exists).

    A last line without its newline is one the daemon is still writing: it is read next time
    (parsing it would fail on a busy machine, where the write is seen half done)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    whole = raw[:raw.rfind(b"\n") + 1]
    return [json.loads(line) for line in whole.splitlines() if line.strip()]


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


def sample(text: str, series: str) -> float | None:
    """The value of one exposition line, given its exact series (name and labels)."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


class DaemonProcess:
    """A `sigwatch run` child process, stopped by PID."""

    def __init__(self, args: list[str], log_path: Path,
                 env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sigwatch", "run", *args],
            stdout=subprocess.DEVNULL, stderr=self._log,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    def stderr(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def wait_started(port: int, timeout: float = 120.0) -> None:
    """Wait until the daemon has opened its files and written its first checkpoint (start-up
    loads the whole library: 0.5 s idle, over 10 s with both cores busy)."""
    def started() -> bool:
        value = sample(scrape(port), "sigwatch_checkpoint_writes_total")
        return value is not None and value >= 1

    wait_for(started, timeout=timeout, what="the daemon's first checkpoint")
