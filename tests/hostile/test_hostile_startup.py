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
from pathlib import Path

import pytest
from conftest import Rig, write_lines
from support.daemon import free_port, wait_for

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
                return self.proc.wait(timeout=20)
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
    """logrotate's postrotate (or a reload racing a restart) can send SIGHUP at any moment.
    Before: the handler was installed after the command line's imports (``argparse``,
    ``sigwatch.cli``, ``pathlib``...), so a SIGHUP during them killed the daemon: 60 to 500 ms
    after exec on a busy machine. Now the entry point installs it before importing anything
    else; the reload asked for is done once the daemon is ready, and it reads as usual."""
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
