"""``sigwatch exec -- COMMAND``: the real command line on small scripts.

The command's output passes through unchanged, both streams are matched live, signals reach
the command and its exit status is ours. Tests wait for the script to say it is ready (a line
on its stdout, read with a deadline), never for a fixed time.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from support.daemon import whole_jsonl

REPO = Path(__file__).resolve().parents[2]
INCIDENT = "RuntimeError: CUDA error: an illegal memory access was encountered"

SCRIPT = f"""\
import sys
out, err = sys.stdout.buffer, sys.stderr.buffer
out.write(b"step 1 loss 2.0\\n")
out.write(b"bytes \\xff\\xfe not utf-8, a tab\\t and a CR\\r\\n")
out.flush()
err.write(b"warming up\\n{INCIDENT}\\n")
err.flush()
out.write(b"step 2 loss 1.9\\nno newline at the end")
out.flush()
sys.exit(3)
"""

WAITER = """\
import os, signal, sys
def on_term(signum, frame):
    sys.stdout.write("got SIGTERM\\n")
    sys.stdout.flush()
    sys.exit(7)
signal.signal(signal.SIGTERM, on_term)
sys.stdout.write(f"ready {os.getpid()}\\n")
sys.stdout.flush()
while True:
    signal.pause()
"""

LAUNCHER = f"""\
import os, sys, time
# A launcher whose worker is still flushing when the launcher itself exits (torchrun, mpirun).
parent = os.getpid()
if os.fork() == 0:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the launcher has exited and been reaped
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            break
        time.sleep(0.005)
    out = sys.stdout.buffer
    for i in range(3000):  # far more than a pipe holds: written while sigwatch reads
        out.write(b"worker step %d loss 0.5 " % i + b"x" * 60 + b"\\n")
    out.flush()
    sys.stderr.write("{INCIDENT}\\n")
    sys.stderr.flush()
    os._exit(0)
sys.stdout.write("launcher done\\n")
sys.stdout.flush()
sys.exit(1)
"""


def _env() -> dict[str, str]:
    # A PYTHONPATH already given wins: ``bench/mutations.py`` points it at a mutated copy.
    return dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH") or str(REPO / "daemon"))


def _exec(tmp: Path, *command: str, **kw: object) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "sigwatch", "exec", "--events", str(tmp / "events.jsonl"),
            "--", *command]
    env = kw.pop("env", None) or _env()
    return subprocess.Popen(argv, env=env, **kw)  # type: ignore[call-overload,no-any-return]


def _events(tmp: Path) -> list[dict[str, object]]:
    return whole_jsonl(tmp / "events.jsonl")


def _read_line(fd: int, timeout: float = 30.0) -> bytes:
    """One line from ``fd``, waiting at most ``timeout`` seconds (select, never sleep)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no line within {timeout} s (got {buf!r})")
        poller = select.poll()  # not select(): descriptors above 1023 in a long test run
        poller.register(fd, select.POLLIN)
        if poller.poll(left * 1000):
            chunk = os.read(fd, 1)
            if not chunk:
                raise AssertionError(f"end of output before a line (got {buf!r})")
            buf += chunk
    return buf


class TestExecPassThrough:
    def test_stdout_is_byte_identical_stderr_kept_detection_reported_status_kept(
            self, tmp_path: Path) -> None:
        """A script that prints an incident to stderr and exits 3, run through exec."""
        script = tmp_path / "job.py"
        script.write_text(SCRIPT)
        direct = subprocess.run([sys.executable, str(script)], capture_output=True,
                                check=False)

        proc = _exec(tmp_path, sys.executable, str(script), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=120)

        assert 3 == direct.returncode
        assert direct.stdout == out
        assert direct.stderr in err
        assert 3 == proc.returncode
        signatures = [e["signature"] for e in _events(tmp_path)]
        assert "cuda_illegal_memory_access" in signatures
        assert b"cuda_illegal_memory_access" in err  # also reported on stderr, not stdout

    def test_the_abnormal_exit_names_the_earlier_detection_as_its_likely_cause(
            self, tmp_path: Path) -> None:
        """Exit status 3 after an incident: a detection of the exit, caused by the incident."""
        script = tmp_path / "job.py"
        script.write_text(SCRIPT)

        proc = _exec(tmp_path, sys.executable, str(script), stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
        proc.wait(timeout=120)

        exits = [e for e in _events(tmp_path) if e["signature"] == "command_exited_abnormally"]
        assert 1 == len(exits)
        assert "cuda_illegal_memory_access" == exits[0]["root_cause"]["signature"]  # type: ignore[index]
        assert "3" == exits[0]["facts"]["exit_status"]  # type: ignore[index]

    def test_output_of_workers_still_flushing_after_the_command_exits_is_kept(
            self, tmp_path: Path) -> None:
        """The command (a launcher) exits first; its worker writes 3,000 lines and then the
        incident only once the launcher has been reaped. All of it passes through and the
        incident is matched: exec waits for the output to end, not only for the command."""
        script = tmp_path / "launcher.py"
        script.write_text(LAUNCHER)

        proc = _exec(tmp_path, sys.executable, str(script), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
        out, err = proc.communicate(timeout=120)

        assert 1 == proc.returncode
        lines = out.splitlines()
        assert b"launcher done" == lines[0]
        assert 3001 == len(lines)
        assert INCIDENT.encode() in err
        signatures = [e["signature"] for e in _events(tmp_path)]
        assert "cuda_illegal_memory_access" in signatures

    def test_a_clean_exit_is_no_detection(self, tmp_path: Path) -> None:
        proc = _exec(tmp_path, sys.executable, "-c", "print('fine')",
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, _err = proc.communicate(timeout=120)

        assert 0 == proc.returncode
        assert b"fine\n" == out
        assert [] == _events(tmp_path)

    def test_a_missing_command_exits_127(self, tmp_path: Path) -> None:
        proc = _exec(tmp_path, str(tmp_path / "no-such-program"), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
        _out, err = proc.communicate(timeout=120)

        assert 127 == proc.returncode
        assert b"cannot run" in err

    def test_a_terminal_stays_a_terminal_and_bytes_stay_unchanged(self, tmp_path: Path) -> None:
        """On a TTY the command gets a TTY (line buffering, colours) and "\\n" stays "\\n"."""
        master, slave = pty.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[1] &= ~termios.OPOST  # our own terminal must not rewrite either
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        code = "import os,sys; sys.stdout.write(f'tty={os.isatty(1)}\\n\\x1b[31mred\\x1b[0m\\n')"
        try:
            proc = _exec(tmp_path, sys.executable, "-c", code, stdout=slave,
                         stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            os.close(slave)
            first = _read_line(master)
            second = _read_line(master)
            proc.wait(timeout=60)
        finally:
            os.close(master)

        assert b"tty=True\n" == first
        assert b"\x1b[31mred\x1b[0m\n" == second
        assert 0 == proc.returncode


class TestExecJobIdentity:
    def test_the_launchers_environment_names_the_job_and_rank_of_every_detection(
            self, tmp_path: Path) -> None:
        """Run under Slurm and torchrun (issue 21): SLURM_JOB_ID is the job, RANK the rank."""
        script = tmp_path / "job.py"
        script.write_text(SCRIPT)
        env = dict(_env(), SLURM_JOB_ID="4471203", SLURM_PROCID="1", RANK="9")

        proc = _exec(tmp_path, sys.executable, str(script), stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, env=env)
        proc.wait(timeout=120)

        found = {(e["signature"], e["job"], e["rank"]) for e in _events(tmp_path)}
        assert {("cuda_illegal_memory_access", "4471203", "9"),
                ("command_exited_abnormally", "4471203", "9")} == found


class TestExecSignals:
    def test_sigterm_reaches_the_child_and_its_status_is_ours(self, tmp_path: Path) -> None:
        script = tmp_path / "waiter.py"
        script.write_text(WAITER)
        proc = _exec(tmp_path, sys.executable, str(script), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
        assert proc.stdout is not None
        try:
            assert _read_line(proc.stdout.fileno()).startswith(b"ready ")

            proc.send_signal(signal.SIGTERM)
            rest, _err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()

        assert b"got SIGTERM\n" == rest
        assert 7 == proc.returncode

    def test_a_sigkilled_child_gives_137_and_an_abnormal_exit_detection(
            self, tmp_path: Path) -> None:
        script = tmp_path / "waiter.py"
        script.write_text(WAITER)
        proc = _exec(tmp_path, sys.executable, str(script), stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)
        assert proc.stdout is not None
        try:
            child = int(_read_line(proc.stdout.fileno()).split()[1])

            os.kill(child, signal.SIGKILL)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()

        assert 137 == proc.returncode
        exits = [e for e in _events(tmp_path) if e["signature"] == "command_exited_abnormally"]
        assert 1 == len(exits)
        assert "SIGKILL" == exits[0]["facts"]["signal"]  # type: ignore[index]
        assert "137" == exits[0]["facts"]["exit_status"]  # type: ignore[index]

    @pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
    def test_sigint_and_sighup_are_forwarded(self, tmp_path: Path, signum: int) -> None:
        """The child gets the signal we got; dying of it, its 128+N is our status.

        The child waits for signals only (``signal.pause``): nothing else can end it. (It
        used to wait on its stdin, which ``communicate`` closes: on a busy machine the end
        of file sometimes came before the forwarded signal, and the child exited 0.)"""
        code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
                " signal.signal(signal.SIGHUP, signal.SIG_DFL);"  # a background job ignores them
                " print('ready', flush=True)\nwhile True: signal.pause()")
        proc = _exec(tmp_path, sys.executable, "-c", code, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert proc.stdout is not None
        try:
            assert b"ready\n" == _read_line(proc.stdout.fileno())

            proc.send_signal(signum)
            # Wait with stdin still open: closing it (communicate) would let the child's
            # read end at EOF and exit 0 before the forwarded signal arrives, on a busy machine.
            proc.wait(timeout=60)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()

        # Python turns SIGINT into KeyboardInterrupt (status 130 via the default handler
        # re-raised by the interpreter); SIGHUP kills it outright.
        assert 128 + signum == proc.returncode
