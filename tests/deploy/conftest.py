"""Fixture: real `sigwatch run` processes for the deployment tests, stopped by PID."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.daemon import DaemonProcess


@pytest.fixture(name="daemon")
def _daemon(tmp_path: Path) -> Iterator[Callable[..., DaemonProcess]]:
    started: list[DaemonProcess] = []

    def start(*args: str) -> DaemonProcess:
        d = DaemonProcess(list(args), tmp_path / f"daemon{len(started)}.stderr")
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()
