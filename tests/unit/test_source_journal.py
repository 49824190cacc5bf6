"""``JournalSource``: a recorded ``journalctl -o json`` stream through the real subprocess reader.

``tests/support/fake_journalctl.py`` plays the recording with journalctl's arguments, so the
source runs exactly as in production (a child process, a non-blocking pipe, cursors), only
the program differs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.source_driver import SourceDriver, stop_all

from sigwatch.sources.base import ReplayNeed, Source
from sigwatch.sources.journal import JournalSource, build_command, entry_lines

FAKE = str(Path(__file__).resolve().parent.parent / "support" / "fake_journalctl.py")
T0 = 1_732_096_931.0
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.fixture(autouse=True)
def _stop_sources() -> Iterator[None]:
    yield
    stop_all()


class Journal:
    """A recorded journal the fake journalctl plays, appended to by the test."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.file = directory / "journal.jsonl"
        self.file.write_text("")
        self.seq = 0x1a0

    def add(self, message: object, *, unit: str = "train.service",
            ident: str = "python3", transport: str = "stdout") -> str:
        self.seq += 1
        usec = int((T0 + self.seq - 0x1a0) * 1e6)
        cursor = (f"s=7d1f0c3a9b2e4f60a1c2d3e4f5a6b7c8;i={self.seq:x};"
                  f"b=9d19f0531f304fa486b369da6c26fb86;m={usec - 10**12:x};t={usec:x};x=5e1c")
        entry = {
            "__CURSOR": cursor, "__REALTIME_TIMESTAMP": str(usec),
            "__MONOTONIC_TIMESTAMP": str(usec - 10**12),
            "_BOOT_ID": "9d19f0531f304fa486b369da6c26fb86", "_TRANSPORT": transport,
            "PRIORITY": "3", "_PID": "4242", "_COMM": ident, "_SYSTEMD_UNIT": unit,
            "SYSLOG_IDENTIFIER": ident, "MESSAGE": message,
        }
        with self.file.open("a") as fh:
            fh.write(json.dumps(entry) + "\n")
        return cursor

    def runs(self) -> list[list[str]]:
        log = self.dir / "argv.log"
        return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path)


def make(journal: Journal, **kw: object) -> Callable[[], Source]:
    def factory() -> Source:
        args: dict[str, object] = {"units": ["train.service"], "backoff": 0.0,
                                   "wall_clock": lambda: T0}
        args.update(kw)
        return JournalSource("journal", directory=str(journal.dir),
                             command=[sys.executable, FAKE], **args)  # type: ignore[arg-type]
    return factory


def test_entries_become_lines_with_the_journal_time(journal: Journal) -> None:
    journal.add("step 10 loss 2.31")
    journal.add(XID)
    d = SourceDriver(make(journal))
    d.start()

    d.poll_until(lambda: len(d.delivered) == 2)

    assert ["step 10 loss 2.31", XID] == d.texts()
    assert [0, 1] == [x.position for x in d.delivered]
    assert T0 + 2 == d.delivered[1].time
    assert "journal" == d.opened[0].kind
    d.stop()


def test_restart_resumes_at_the_cursor_without_replay_or_gap(journal: Journal) -> None:
    journal.add("one")
    second = journal.add("two")
    d = SourceDriver(make(journal))
    d.start()
    d.poll_until(lambda: len(d.delivered) == 2)

    d.snapshot()
    d.stop()
    journal.add("three: written while the daemon was down")
    d.start()
    journal.add("four")
    d.poll_until(lambda: len(d.delivered) == 4)

    assert ["one", "two", "three: written while the daemon was down", "four"] == d.texts()
    assert [0, 1, 2, 3] == [x.position for x in d.delivered]
    assert f"--after-cursor={second}" in journal.runs()[-1]
    assert [] == d.replayed
    assert [] == d.duplicates()
    d.stop()


def test_a_restart_before_the_first_entry_misses_nothing(journal: Journal) -> None:
    d = SourceDriver(make(journal))
    d.start()
    d.poll_until(lambda: journal.runs(), what="journalctl started")
    d.snapshot()
    d.stop()

    journal.add("written while down, before we ever saw an entry")
    d.start()
    d.poll_until(lambda: len(d.delivered) == 1)

    assert ["written while down, before we ever saw an entry"] == d.texts()
    assert f"--since=@{T0:.6f}" in journal.runs()[-1]
    d.stop()


def test_a_multi_line_message_is_several_lines_and_a_byte_array_is_decoded(
        journal: Journal) -> None:
    journal.add("Traceback (most recent call last):\n  File \"train.py\", line 3\nRuntimeError: x\n")
    journal.add(list(b"caf\xc3\xa9 \xff"))  # not UTF-8: journalctl prints a byte array
    d = SourceDriver(make(journal))
    d.start()

    d.poll_until(lambda: len(d.delivered) == 4)

    assert ["Traceback (most recent call last):", '  File "train.py", line 3',
            "RuntimeError: x", "caf\u00e9 \ufffd"] == d.texts()
    assert [0, 1, 2, 3] == [x.position for x in d.delivered]
    d.stop()


def test_restart_replays_from_an_older_position_through_its_cursor(journal: Journal) -> None:
    first = journal.add("a")
    journal.add("Traceback (most recent call last):\n  File \"x.py\"\nValueError: y")
    journal.add("c")
    d = SourceDriver(make(journal))
    d.start()
    d.poll_until(lambda: len(d.delivered) == 5)
    d.need = lambda _h: ReplayNeed(position=2, lineno=2)  # the traceback's 2nd line

    d.restart()
    journal.add("d")
    d.poll_until(lambda: len(d.delivered) == 6)

    assert f"--after-cursor={first}" in journal.runs()[-1]
    assert ['  File "x.py"', "ValueError: y", "c"] == [x.text for x in d.replayed]
    assert (2, 2, 5) == (d.opened[-1].position, d.opened[-1].lineno, d.opened[-1].replay_below)
    assert "d" == d.texts()[-1]
    assert [] == d.duplicates()
    d.stop()


def test_journalctl_exiting_is_restarted_from_the_last_cursor(journal: Journal) -> None:
    journal.add("a")
    d = SourceDriver(make(journal))
    source = d.start()
    d.poll_until(lambda: len(d.delivered) == 1)

    (journal.dir / "exit").write_text("")
    d.poll_until(lambda: source.restarts == 1, what="journalctl exit noticed")  # type: ignore[attr-defined]
    journal.add("b")
    d.poll_until(lambda: len(d.delivered) == 2)

    assert ["a", "b"] == d.texts()
    assert any("rotated away" in e for e in source.errors)  # type: ignore[attr-defined]
    assert 2 == len(journal.runs())
    d.stop()


@pytest.mark.parametrize("how", ["exits after a rotation", "is killed"])
def test_entries_printed_just_before_journalctl_ends_are_delivered_once(
        journal: Journal, how: str) -> None:
    """journalctl prints entries and ends before we read them (the journal was rotated away
    under it, or something killed it): they sit in the pipe before its end of file. They are
    delivered exactly once, from the pipe or read again after the last handed-out cursor;
    never dropped with the dead process, never skipped by the restart."""
    journal.add("a")
    d = SourceDriver(make(journal))
    source = d.start()
    assert isinstance(source, JournalSource)
    d.poll_until(lambda: len(d.delivered) == 1)
    journalctl = source.proc
    assert journalctl is not None

    journal.add("b")
    journal.add("c")
    printed = sum(len(x) + 1 for x in journal.file.read_text().splitlines()[1:])
    _wait_until(lambda: _unread(source) >= printed, what="b and c in the pipe")
    if how == "is killed":
        journalctl.kill()
    else:
        (journal.dir / "exit").write_text("")
    _wait_until(lambda: journalctl.poll() is not None, what="journalctl to end")
    d.poll_until(lambda: len(d.delivered) >= 3 and source.restarts >= 1,
                 what="b and c after journalctl ended")

    assert ["a", "b", "c"] == d.texts()
    assert [] == d.duplicates()
    d.stop()


def _unread(source: JournalSource) -> int:
    from sigwatch.sources.journal import _unread_bytes

    return _unread_bytes(source.fds())


def _wait_until(condition: Callable[[], object], *, what: str, timeout: float = 30.0) -> None:
    """Wait without polling the source (its pipe must fill up untouched)."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def test_entries_of_other_units_are_not_read(journal: Journal) -> None:
    journal.add("sshd noise", unit="ssh.service", ident="sshd")
    journal.add("ours")
    d = SourceDriver(make(journal))
    d.start()

    d.poll_until(lambda: len(d.delivered) == 1)

    assert ["ours"] == d.texts()
    assert "--unit=train.service" in journal.runs()[0]
    d.stop()


def test_kernel_messages_are_matched_by_transport_not_by_dash_k() -> None:
    argv = build_command(["journalctl"], kernel=True, after_cursor="s=1;i=2")

    assert "_TRANSPORT=kernel" in argv
    assert "-k" not in argv and "--dmesg" not in argv  # -k implies -b: loses the last boot
    assert "--all" in argv and "--output=json" in argv and "--follow" in argv


def test_journald_suppression_notices_are_counted(journal: Journal) -> None:
    journal.add("Suppressed 4211 messages from train.service", unit="train.service",
                ident="systemd-journald", transport="driver")
    counted: list[int] = []
    d = SourceDriver(make(journal, on_suppressed=lambda _n, c: counted.append(c)))
    d.start()

    d.poll_until(lambda: len(d.delivered) == 1)

    assert [4211] == counted
    d.stop()


def test_entry_lines_keep_the_unit_as_the_tag() -> None:
    lines = entry_lines({"__CURSOR": "c", "__REALTIME_TIMESTAMP": "1000000",
                         "_SYSTEMD_UNIT": "train.service", "MESSAGE": "x\n"}, 7)

    assert [(b"x\n", 7, 1.0, "train.service")] == [(s.data, s.offset, s.time, s.tag)
                                                   for s in lines]
    assert [] == entry_lines({"__CURSOR": "c", "MESSAGE": None}, 0)


def _real_journal_reason() -> str | None:
    if shutil.which("journalctl") is None:
        return "journalctl is not installed"
    try:
        out = subprocess.run(["journalctl", "--no-pager", "-o", "json", "-n", "1"],
                             capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"journalctl does not run: {exc}"
    if out.returncode != 0 or not out.stdout.strip():
        why = out.stderr.decode(errors="replace").strip() or "no entries"
        return f"no readable journal on this machine ({why})"
    return None


@pytest.mark.integration
def test_the_real_journal_is_followed_from_a_cursor() -> None:
    reason = _real_journal_reason()
    if reason:
        pytest.skip(reason)
    last = json.loads(subprocess.run(["journalctl", "--no-pager", "-o", "json", "-n", "2"],
                                     capture_output=True, check=True).stdout.splitlines()[0])
    saved = {"cursor": last["__CURSOR"],
             "resume": {"position": 0, "lineno": 0, "cursor": last["__CURSOR"]}}
    source = JournalSource("journal", backoff=0.0)
    d = SourceDriver(lambda: source, saved=saved)
    d.start(first_start=False)

    d.poll_until(lambda: len(d.delivered) >= 1, timeout=20, what="the newest entry")

    assert d.delivered[0].time is not None
    d.stop()


JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"


def _append_real(directory: Path, index: int, message: str) -> None:
    """Append one entry to a real journal file (systemd-journal-remote writes the format)."""
    usec = int((T0 + index) * 1e6)
    export = directory / f"e{index}.export"
    export.write_text(f"__REALTIME_TIMESTAMP={usec}\n__MONOTONIC_TIMESTAMP={index * 1000}\n"
                      "_BOOT_ID=9d19f0531f304fa486b369da6c26fb86\n_SYSTEMD_UNIT=train.service\n"
                      f"SYSLOG_IDENTIFIER=python3\nMESSAGE={message}\n\n")
    subprocess.run([JOURNAL_REMOTE, f"--output={directory / 'remote.journal'}", str(export)],
                   check=True, capture_output=True, timeout=30)
    export.unlink()


@pytest.mark.integration
def test_real_journalctl_on_real_journal_files_resumes_at_the_cursor(tmp_path: Path) -> None:
    if shutil.which("journalctl") is None or not Path(JOURNAL_REMOTE).exists():
        pytest.skip("needs journalctl and systemd-journal-remote (apt install "
                    "systemd-journal-remote) to write a journal file")
    store = tmp_path / "journal"
    store.mkdir()
    _append_real(store, 1, "step 1 loss 2.3")
    _append_real(store, 2, XID)
    d = SourceDriver(lambda: JournalSource("journal", units=["train.service"],
                                           directory=str(store), backoff=0.0,
                                           wall_clock=lambda: T0))
    d.start()
    d.poll_until(lambda: len(d.delivered) == 2, timeout=20)

    d.snapshot()
    d.stop()
    _append_real(store, 3, "written while the daemon was down")
    d.start()
    d.poll_until(lambda: len(d.delivered) == 3, timeout=20)
    _append_real(store, 4, "followed live")
    d.poll_until(lambda: len(d.delivered) == 4, timeout=20)

    assert ["step 1 loss 2.3", XID, "written while the daemon was down",
            "followed live"] == d.texts()
    assert [T0 + i for i in (1, 2, 3, 4)] == [x.time for x in d.delivered]
    assert [] == d.duplicates()
    d.stop()
