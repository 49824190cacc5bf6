"""The exactly-once model test for the journal and the kernel log, through the real runtime.

The same runtime, pipeline, event log and checkpoint as the file and ``ListSource`` model
tests (``test_model_integer_source.py``), with the real readers:

* ``JournalSource`` running ``tests/support/fake_journalctl.py``, which plays a recorded
  ``journalctl -o json`` stream and honours ``--after-cursor``: restarts (graceful or a crash
  between two passes) and journalctl ending under us (killed, maybe with entries still in its
  pipe) must resume at the cursor with no replay and no gap;
* ``KmsgSource`` on a recorded ``/dev/kmsg`` stream (``pri,seq,usec,flags;text`` records):
  sequence-number gaps (the ring buffer overwrote records) must be counted as loss, never
  silent, and a reboot (a new boot id, sequence numbers from 0) starts the new boot fresh.

Random appends, two-step sequences left open across restarts (so resuming at a detector's
replay floor is exercised), passes, restarts and crashes; every written record is detected
exactly once, never twice at any step. The journal player is a separate process, so reading
is asynchronous: checks wait (with a deadline, on the source's descriptors) until what was
written has been read.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
from harness import Harness, duplicates
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from sigwatch.sources.journal import JournalSource
from sigwatch.sources.kmsg import KmsgSource

FAKE = str(Path(__file__).resolve().parents[1] / "support" / "fake_journalctl.py")
PAIR_SIGNATURE = """\
id = "test_open_close"
title = "Test Open Close"
severity = "error"
[match]
regex = 'OPEN seq=(?P<seq>\\d+)'
[[match.then]]
regex = 'CLOSE'
within_lines = 5000
"""


class _RecordsMachine(RuleBasedStateMachine):
    """Appends records, opens and closes two-step sequences, passes, restarts, crashes."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="sigwatch-model-"))
        self.written: list[int] = []
        self.h: Harness | None = None
        self.opened = False
        self.count = 0  # records written

    # -- what each kind of source provides -----------------------------------------------

    def make_source(self) -> object:
        raise NotImplementedError

    def write(self, text: str) -> None:
        raise NotImplementedError

    def kill_source(self) -> None:
        """The source's own resources die with the crashed process."""

    def caught_up(self) -> bool:
        """True once the source has read every record written (asynchronous readers)."""
        return True

    # -- rules ---------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.h = Harness(self.tmp, source_factory=lambda _c, _m: self.make_source())  # type: ignore[arg-type,return-value]
        (self.h.patterns / "test" / "test_open_close.toml").write_text(PAIR_SIGNATURE)
        self.h.start()

    @rule(count=st.integers(1, 6), noise=st.integers(0, 2))
    def append(self, count: int, noise: int) -> None:
        for _ in range(count):
            seq = len(self.written) + 1
            self.written.append(seq)
            self.write(f"ERROR seq={seq}")
            for _ in range(noise):
                self.write("INFO nothing to see")

    @precondition(lambda self: not self.opened)
    @rule()
    def open_sequence(self) -> None:
        seq = 1_000_000 + len(self.written)
        self.written.append(seq)
        self.opened = True
        self.write(f"OPEN seq={seq}")

    @precondition(lambda self: self.opened)
    @rule()
    def close_sequence(self) -> None:
        self.write("CLOSE")
        self.opened = False

    @rule(passes=st.integers(1, 3))
    def tick(self, passes: int) -> None:
        assert self.h is not None
        for _ in range(passes):
            self.h.tick()

    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        assert self.h is not None
        if crash:
            self.kill_source()
        self.h.restart(crash=crash)

    @invariant()
    def never_twice(self) -> None:
        if self.h is not None:
            assert {} == duplicates(self.h.seqs())

    # -- the end -------------------------------------------------------------------------

    def drain(self, timeout: float = 30.0) -> None:
        """Pass until the source caught up and everything written is detected."""
        assert self.h is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.h.tick()
            if self.caught_up() and set(self.written) <= set(self.h.seqs()):
                self.h.pump()
                return
            fds = getattr(self.current, "fds", lambda: ())()
            if fds:
                poller = select.poll()
                for fd in fds:
                    poller.register(fd, select.POLLIN)
                poller.poll(100)
        raise AssertionError(f"not caught up after {timeout} s: missing "
                             f"{sorted(set(self.written) - set(self.h.seqs()))[:10]}")

    current: object = None

    def teardown(self) -> None:
        try:
            if self.h is None:
                return
            if self.opened:
                self.close_sequence()
            self.drain()
            self.h.restart()
            self.drain()
            got = self.h.seqs()
            assert {} == duplicates(got)
            assert sorted(self.written) == sorted(got)
            self.check_losses()
            self.h.stop()
        finally:
            self.kill_source()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def check_losses(self) -> None:
        """Nothing here is lost unless a rule says so."""


class JournalMachine(_RecordsMachine):
    """A recorded journal read through journalctl's arguments, cursor by cursor."""

    def __init__(self) -> None:
        super().__init__()
        self.journal = self.tmp / "journal"
        self.journal.mkdir()
        (self.journal / "journal.jsonl").write_text("")
        self.sources: list[JournalSource] = []

    def make_source(self) -> JournalSource:
        source = JournalSource("records", units=["train.service"],
                               directory=str(self.journal), command=[sys.executable, FAKE],
                               lookback=3600.0, backoff=0.0)
        self.sources.append(source)
        self.current = source
        return source

    def write(self, text: str) -> None:
        self.count += 1
        entry = {"__CURSOR": f"s=abc;i={self.count:x};b=boot;m=1;t=1;x=1",
                 "__REALTIME_TIMESTAMP": str(int(time.time() * 1e6)),
                 "_SYSTEMD_UNIT": "train.service", "MESSAGE": text}
        with (self.journal / "journal.jsonl").open("a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def caught_up(self) -> bool:
        source = self.current
        assert isinstance(source, JournalSource)
        last = source.cursor or ""
        return last.endswith(f";i={self.count:x};b=boot;m=1;t=1;x=1") or self.count == 0

    @rule()
    def journalctl_ends(self) -> None:
        """journalctl is killed (or its journal rotated away under it), maybe with entries
        still in its pipe: the source starts it again after the last handed-out cursor."""
        source = self.current
        if isinstance(source, JournalSource) and source.proc is not None:
            source.proc.kill()
            source.proc.wait()

    def kill_source(self) -> None:
        for source in self.sources:
            if source.proc is not None:
                source.proc.kill()
                source.proc.wait()
                source._close_proc()  # noqa: SLF001 - the process died with the daemon


class KmsgMachine(_RecordsMachine):
    """A recorded ``/dev/kmsg`` stream: sequence numbers, gaps, reboots."""

    def __init__(self) -> None:
        super().__init__()
        self.device = self.tmp / "kmsg"
        self.device.write_bytes(b"")
        self.boot = self.tmp / "boot_id"
        self.boot_no = 0
        self.boot.write_text("boot-0\n")
        self.next_seq = 0
        self.gaps = 0
        self.crashed = False
        self.lost: list[int] = []
        self.sources: list[KmsgSource] = []

    def make_source(self) -> KmsgSource:
        source = KmsgSource("records", path=str(self.device), boot_id_path=str(self.boot),
                            boot_time=0.0, on_loss=lambda _n, c: self.lost.append(c))
        self.sources.append(source)
        self.current = source
        return source

    def write(self, text: str) -> None:
        self.count += 1
        with self.device.open("ab") as fh:
            fh.write(f"6,{self.next_seq},{self.next_seq * 1000},-;{text}\n".encode())
            fh.write(b" SUBSYSTEM=test\n")  # dictionary lines are metadata, never text
        self.next_seq += 1

    # Not before the first record of the first boot: whether the buffer starting above 0 is
    # loss depends on whether a checkpoint was written before it (history vs. a gap).
    @precondition(lambda self: self.next_seq > 0 or self.boot_no > 0)
    @rule(count=st.integers(1, 5))
    def gap(self, count: int) -> None:
        """The ring buffer overwrote ``count`` records before they were read; the next
        record's sequence number shows it (a gap at the very end is seen later)."""
        self.gaps += count
        self.next_seq += count
        self.append(1, 0)

    @precondition(lambda self: not self.opened)
    @rule()
    def reboot(self) -> None:
        """Read what this boot wrote, stop, and boot again: sequence numbers restart."""
        self.drain()
        assert self.h is not None
        self.h.stop()
        self.kill_source()
        self.boot_no += 1
        self.boot.write_text(f"boot-{self.boot_no}\n")
        self.device.write_bytes(b"")
        self.next_seq = 0
        self.h.start()

    def kill_source(self) -> None:
        for source in self.sources:
            if source.fd is not None:
                os.close(source.fd)
                source.fd = None

    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        self.crashed |= crash
        super().restart(crash)

    def check_losses(self) -> None:
        # Every overwritten record is counted, never silent; a crash before the checkpoint
        # recorded the gap may count it again when the records are read again.
        if self.crashed:
            assert self.gaps <= sum(self.lost)
        else:
            assert self.gaps == sum(self.lost)


JournalMachine.TestCase.settings = settings(
    max_examples=12, stateful_step_count=18, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
KmsgMachine.TestCase.settings = settings(
    max_examples=30, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_journal_is_exactly_once_across_restarts = pytest.mark.slow(JournalMachine.TestCase)
test_kmsg_is_exactly_once_and_counts_gaps = pytest.mark.slow(KmsgMachine.TestCase)
