"""Start-up on a hostile machine: signals before the daemon is ready, an unusable state folder.

Real ``sigwatch run`` processes. To send a signal at an exact moment of start-up (not "about
50 ms in", which a busy machine turns into any moment), the test parks the process inside
the import of a chosen module: a ``sitecustomize`` put first on its ``PYTHONPATH`` installs
an import hook that, when that module is about to be imported, says so and blocks on a FIFO
until the test lets it go.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import free_port, wait_for
from support.hostile import Rig, Running, write_lines

pytestmark = pytest.mark.integration

PARK_HOOK = '''\
"""Test hook: park this process when it is about to import $SIGWATCH_TEST_PARK_AT."""
import os
import sys

_WANTED = os.environ.get("SIGWATCH_TEST_PARK_AT", "")
_FIFO = os.environ.get("SIGWATCH_TEST_PARK_FIFO", "")


class _Park:
    def find_spec(self, name, path=None, target=None):
        if name == _WANTED:
            sys.meta_path.remove(self)
            with open(_FIFO + ".parked", "w") as note:
                note.write(str(os.getpid()))
            fd = os.open(_FIFO, os.O_RDONLY)  # blocks until the test opens it to write
            try:
                os.read(fd, 1)
            finally:
                os.close(fd)
        return None


if _WANTED and _FIFO:
    sys.meta_path.insert(0, _Park())
'''


def _console_script() -> Path:
    """The ``sigwatch`` program pip made from ``[project.scripts]`` (what systemd runs)."""
    found = shutil.which("sigwatch", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip("no sigwatch console script next to this interpreter (not installed)")
    return Path(found)


class Parked:
    """A ``sigwatch run`` process held inside the import of one module."""

    def __init__(self, rig: Rig, entry: str, module: str) -> None:
        hook = rig.root / "park"
        hook.mkdir(exist_ok=True)
        (hook / "sitecustomize.py").write_text(PARK_HOOK, encoding="utf-8")
        self.fifo = hook / "fifo"
        os.mkfifo(self.fifo)
        self.port = free_port()
        env = dict(os.environ, SIGWATCH_TEST_PARK_AT=module,
                   SIGWATCH_TEST_PARK_FIFO=str(self.fifo), PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
        program = ([str(_console_script())] if entry == "console script"
                   else [sys.executable, "-m", "sigwatch"])
        argv = [*program, "run", "--watch", str(rig.logs / "*.log"),
                "--events", str(rig.events), "--state-dir", str(rig.state),
                "--listen", f"127.0.0.1:{self.port}", "--patterns", str(rig.patterns),
                "--start-at", "beginning", "--no-console"]
        self.log = rig.root / "daemon.stderr"
        with open(self.log, "wb") as err:
            self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)

    def wait_parked(self) -> None:
        note = Path(f"{self.fifo}.parked")
        wait_for(lambda: note.exists() or self.proc.poll() is not None, timeout=60,
                 what="the process to reach the module")
        assert self.proc.poll() is None, self.stderr()

    def release(self) -> None:
        fd = os.open(self.fifo, os.O_WRONLY)
        try:
            os.write(fd, b"go")
        finally:
            os.close(fd)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@pytest.mark.parametrize(("entry", "module"), [
    ("console script", "argparse"),
    ("console script", "sigwatch.cli"),
    ("console script", "structlog"),
    ("python -m", "sigwatch.cli"),
    ("python -m", "pathlib"),
])
def test_a_sighup_while_start_up_imports_anything_is_a_reload_once_ready(
        rig: Rig, entry: str, module: str) -> None:
    """Case 14. logrotate's postrotate (or a reload racing a restart) can send SIGHUP at any
    moment. Before: the handler was installed after the command line's imports
    (``argparse``, ``sigwatch.cli``, ``pathlib``...), so a SIGHUP during them killed the
    daemon: 60 to 500 ms after exec on a busy machine. Now the entry point installs it before
    importing anything else; the reload asked for is done once the daemon is ready, and it
    reads as usual. (This replaces the first version of the test, which sent SIGHUP a fixed
    50 to 300 ms after the interpreter was up: on a busy machine the interpreter's own
    start-up, before any of our code, outlasts 50 ms.)"""
    parked = Parked(rig, entry, module)
    try:
        parked.wait_parked()

        # Delivered before the process runs another instruction of its own: it is blocked
        # in a system call, and a signal is acted on when that call returns.
        parked.proc.send_signal(signal.SIGHUP)
        parked.release()

        written = write_lines(rig.logs / "app.log", range(1, 11))
        wait_for(lambda: parked.proc.poll() is not None or set(written) <= set(rig.seqs()),
                 timeout=60, what="the lines")
        assert parked.proc.poll() is None, f"killed by the SIGHUP: {parked.stderr()}"
        assert sorted(written) == sorted(rig.seqs())
        wait_for(lambda: "patterns_reloaded" in parked.stderr() or parked.proc.poll(),
                 timeout=60, what="the reload asked for during start-up")
    finally:
        status = parked.stop()
    assert 0 == status, parked.stderr()


# -- an unusable state directory ------------------------------------------------------------


class StateMount:
    """A small tmpfs for the state directory (mounted by the test: root only, else skip)."""

    def __init__(self, where: Path) -> None:
        self.path = where
        where.mkdir()
        self._run("mount", "-t", "tmpfs", "-o", "size=256k,nr_inodes=256", "tmpfs", str(where))

    @staticmethod
    def _run(*argv: str) -> None:
        result = subprocess.run(argv, capture_output=True, check=False)
        if result.returncode != 0:
            pytest.skip(f"cannot {' '.join(argv[:3])} (needs root and mount rights): "
                        f"{result.stderr.decode().strip()}")

    def read_only(self) -> None:
        self._run("mount", "-o", "remount,ro", str(self.path))

    def writable(self) -> None:
        self._run("mount", "-o", "remount,rw", str(self.path))

    def fill(self) -> Path:
        """Fill the file system: every byte, then every inode (so not even an empty lock
        file can be made); returns the folder to delete to free it all."""
        filler = self.path / "filler"
        filler.mkdir()
        fd = os.open(filler / "bytes", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        for n in range(100_000):
            try:
                (filler / str(n)).touch()
            except OSError:
                break
        return filler

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], check=False, capture_output=True)


@pytest.fixture(name="state_mount")
def _state_mount(tmp_path: Path) -> Iterator[StateMount]:
    mount = StateMount(tmp_path / "state-mnt")
    try:
        yield mount
    finally:
        mount.unmount()


def _ready(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def _degraded_but_locked(rig: Rig, state: Path, why: str) -> Running:
    """The daemon runs on an unusable state directory: it reads and reports, says it is not
    ready (naming the directory), counts the failed checkpoints, and holds its lock: a
    second daemon on the same directory is refused with one line and status 2."""
    d = rig.start(state=state)
    written = write_lines(rig.logs / "app.log", range(1, 21))
    rig.wait_seqs(written, daemon=d)
    wait_for(lambda: (d.metric("sigwatch_checkpoint_errors_total") or 0) > 0,
             timeout=30, what="a counted checkpoint failure")
    status, body = _ready(d.port)
    assert 503 == status, body
    assert "state directory" in body and str(state) in body and why in body, body

    second = rig.start(state=state)
    assert 2 == second.d.proc.wait(timeout=60), second.stderr()
    lines = [ln for ln in second.stderr().splitlines() if ln.strip()]
    assert 1 == len(lines), lines
    assert str(state) in lines[0]
    assert d.alive()
    return d


@pytest.mark.parametrize("used_before", [False, True])
def test_a_read_only_state_directory_runs_degraded_and_keeps_the_lock(
        rig: Rig, state_mount: StateMount, used_before: bool) -> None:
    """The state directory is read-only (fresh, or used by an earlier run and remounted
    read-only since: the lock file is there but cannot be written). Before: the daemon ran
    without a checkpoint and without saying so anywhere but its log, and without its lock a
    second daemon could start on the same directory."""
    if used_before:
        first = rig.start(state=state_mount.path)
        first.wait_started()
        assert 0 == first.stop()
    state_mount.read_only()

    d = _degraded_but_locked(rig, state_mount.path, "Read-only file system")

    assert 0 == d.stop()


def test_a_full_state_directory_runs_degraded_keeps_the_lock_and_recovers(
        rig: Rig, state_mount: StateMount) -> None:
    """The state directory's file system is full from the start (no byte and no inode left).
    Before: no checkpoint and no instance lock (the lock file could not be made), so a second
    daemon ran beside the first. When space comes back, the next checkpoint is written and
    the daemon is ready again."""
    filler = state_mount.fill()

    d = _degraded_but_locked(rig, state_mount.path, "No space left on device")

    shutil.rmtree(filler)
    wait_for(lambda: _ready(d.port)[0] == 200, timeout=60, what="ready again")
    wait_for(lambda: (state_mount.path / "checkpoint.json").exists(), timeout=30,
             what="a checkpoint")
    assert 0 == d.stop()


def test_a_state_directory_that_cannot_be_made_refuses_start_up(
        rig: Rig, state_mount: StateMount) -> None:
    """The state directory does not exist and cannot be made (its parent is read-only):
    nothing could be locked, so the daemon does not start: status 2 and one line naming the
    directory and why."""
    state_mount.read_only()
    missing = state_mount.path / "sigwatch"

    d = rig.start(state=missing)

    assert 2 == d.d.proc.wait(timeout=60)
    lines = [ln for ln in d.stderr().splitlines() if ln.strip()]
    assert 1 == len(lines), lines
    assert str(missing) in lines[0] and "Read-only file system" in lines[0]
