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
    """An exclusive ``flock`` on the state directory itself and on ``<state_dir>/lock``, held
    for the process's life.

    The directory's lock needs nothing written: it holds on a read-only or full file system,
    where the lock file may not exist and cannot be made. The lock file (kept for older
    daemons and for ``sigwatch health``, which reads our PID from it) is taken too whenever it
    can be opened; writing our PID into it is best effort. ``problem`` says why the lock file
    could not be used (empty when it could).
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.path = state_dir / "lock"
        self.problem = ""
        self._fds: list[int] = []

    def acquire(self) -> None:
        """Take both locks or raise ``InstanceLockedError``. Raises ``OSError`` when the
        directory cannot be made or opened: then no lock can be held at all."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            if not self.state_dir.is_dir():
                raise
        folder = os.open(self.state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._take(folder)
        fd = self._open_lock_file()
        if fd is not None:
            self._take(fd)
            self._write_pid(fd)

    def _take(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            self.release()
            raise InstanceLockedError(self.state_dir, self._holder()) from None
        self._fds.append(fd)

    def _open_lock_file(self) -> int | None:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self.problem = f"{self.path}: {exc.strerror}"
        try:  # read-only file system: an existing lock file can still be locked
            return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    def _write_pid(self, fd: int) -> None:
        pid = f"{os.getpid()}\n".encode()
        try:
            os.pwrite(fd, pid, 0)
            os.ftruncate(fd, len(pid))
        except OSError as exc:
            self.problem = self.problem or f"{self.path}: {exc.strerror}"

    def _holder(self) -> str:
        try:
            with open(self.path, "rb") as fh:
                return fh.read(32).decode(errors="replace").strip()
        except OSError:
            return ""

    def release(self) -> None:
        while self._fds:
            os.close(self._fds.pop())
