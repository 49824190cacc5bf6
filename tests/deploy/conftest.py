"""Fixture: real `sigwatch run` processes for the deployment tests, stopped by PID."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.daemon import DaemonProcess
from support.rootfs import debian_rootfs_tar


@pytest.fixture(name="debian_rootfs", scope="session")
def _debian_rootfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One minimal Debian root (tar) per session, for the .deb and the image tests."""
    folder = tmp_path_factory.mktemp("rootfs")
    tar = debian_rootfs_tar(folder)
    yield tar
    if tar.parent == folder:
        tar.unlink(missing_ok=True)  # 200 MB: not kept in pytest's last three runs


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(name="packaged", scope="session")
def _packaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``./dev.sh package`` run once, into a temporary dist folder: the wheel and the .deb."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb is missing (apt-get install dpkg)")
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run([str(REPO / "dev.sh"), "package"], cwd=REPO,
                          env={**os.environ, "DIST": str(dist)},
                          capture_output=True, text=True, check=False, timeout=1800)
    assert 0 == done.returncode, done.stdout[-2000:] + done.stderr[-2000:]
    return dist


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
