"""Process-level guards of ``sigwatch run``: signals caught from the first instant, one
daemon per state directory.

``EarlySignals`` (``sigwatch.entry``, re-exported here) is installed by the entry point before
anything else is imported: until the daemon is built, SIGHUP and SIGTERM only set flags (the
default action of SIGHUP would kill a daemon still loading its patterns); ``run_daemon`` hands
them over to the real handlers. ``InstanceLock`` is an ``flock`` on ``<state_dir>/lock`` held
for the daemon's life: a second daemon on the same state would report everything twice and
overwrite the checkpoint, so it is refused at start-up.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sigwatch.entry import EarlySignals

__all__ = ["EarlySignals", "InstanceLock", "InstanceLockedError"]


class InstanceLockedError(Exception):
    """Another daemon holds the state directory (``app`` turns it into exit status 2).

    Not a ``SigwatchError``: this module is imported before anything else of the package.
    """

    def __init__(self, state_dir: Path, holder: str) -> None:
        self.state_dir = state_dir
        self.holder = holder
        who = f" (pid {holder})" if holder else ""
        super().__init__(f"another sigwatch{who} is running on state directory {state_dir}; "
                         "refusing to start a second one")


class InstanceLock:
    """An exclusive ``flock`` on ``<state_dir>/lock``; released when the process ends."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / "lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ``InstanceLockedError``; writes our PID into the file."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            finally:
                os.close(fd)
            raise InstanceLockedError(self.state_dir, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
