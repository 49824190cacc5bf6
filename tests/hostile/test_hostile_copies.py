"""copytruncate with a glob that also matches the copies (``*.log*``, chosen so that late
writes to rotated files are read).

logrotate's ``copytruncate`` copies ``app.log`` to ``app.log.1`` (a new file) and truncates
``app.log``. The copy's content is history the daemon has already read from the original:
it must never be read twice (before: every copy was a new file, read from byte 0, and every
detection in it was reported again). The bytes the copy holds past what was read (lines
written after our last read and before the truncation) are read once, from the copy.

The first tests drive the real file source in-process (``reliability/harness.py``) through
each order in which the daemon can see the copy and the truncation; the last one runs the
real ``logrotate`` against the real daemon.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from harness import Harness, Writer, duplicates
from support.daemon import wait_for
from support.debian import require
from support.hostile import Rig, dup, write_lines

from sigwatch.sources.files import TailOptions

GLOB = "*.log*"
COPY_EVENTS = ("copy_of_followed_file", "copy_continues_truncated_file", "copy_of_read_content")


def _copytruncate(log: Path, keep: int = 3) -> None:
    """What logrotate does with ``copytruncate`` and ``rotate keep``: shift the older copies
    (renames), copy the log to ``.1``, truncate the log."""
    oldest = log.with_name(f"{log.name}.{keep}")
    if oldest.exists():
        oldest.unlink()
    for n in range(keep - 1, 0, -1):
        older = log.with_name(f"{log.name}.{n}")
        if older.exists():
            os.rename(older, log.with_name(f"{log.name}.{n + 1}"))
    shutil.copyfile(log, log.with_name(f"{log.name}.1"))
    os.truncate(log, 0)


def _harness(root: Path, *, rescan: float = 1.0) -> Harness:
    return Harness(root, (GLOB,), options=TailOptions(
        poll_interval=1.0, rescan_interval=rescan, checkpoint_interval=1.0, rotate_wait=5.0))


def _exactly_once(h: Harness, w: Writer) -> None:
    got = h.seqs()
    assert {} == duplicates(got)
    assert sorted(w.written) == sorted(got)
    assert 0 == h.losses_counted()


def test_a_copy_of_what_was_read_is_not_read_again(tmp_path: Path) -> None:
    """Everything was read when logrotate ran: the copy holds nothing new."""
    h = _harness(tmp_path)
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    w.lines(30)
    h.pump()

    _copytruncate(h.logs / "app.log")
    w.lines(10)
    h.settle()

    _exactly_once(h, w)


def test_lines_written_after_our_last_read_are_read_once_from_the_copy(tmp_path: Path) -> None:
    """Five lines were written after our last read and before the copy: only the copy has
    them now. They are read from it, once; the rest of the copy is not read again."""
    h = _harness(tmp_path)
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    w.lines(30)
    h.pump()
    w.lines(5)

    _copytruncate(h.logs / "app.log")
    w.lines(10)
    h.settle()

    _exactly_once(h, w)


def test_a_copy_found_after_the_truncation_was_handled_is_not_read_again(tmp_path: Path) -> None:
    """The truncation is seen first (the original is read on every pass; the folder is looked
    at again only later): the gap is read from the copy then. When the folder is looked at
    again, the copy is a new name with nothing unread."""
    h = _harness(tmp_path, rescan=30.0)
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    w.lines(30)
    h.pump()
    w.lines(5)

    _copytruncate(h.logs / "app.log")
    w.lines(10)
    h.tick()  # the original: truncated, the gap read from the copy; no rescan yet
    h.tick(31)  # the rescan finds app.log.1
    h.settle()

    _exactly_once(h, w)


def test_a_copy_taken_before_our_last_read_is_history_already_read(tmp_path: Path) -> None:
    """logrotate copied, a few lines were written and read by us, then it truncated: the
    copy is shorter than what we read (those few lines are in no file any more), so all of
    it was read. Lines written after our last read and before the truncation would be in no
    file either: that is counted as a possible loss, as for a truncation without a copy."""
    h = _harness(tmp_path)
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    w.lines(30)
    h.pump()
    log = h.logs / "app.log"
    shutil.copyfile(log, log.with_name("app.log.1"))  # logrotate's copy
    w.lines(3)
    h.pump()  # we read them; the copy does not have them
    os.truncate(log, 0)  # logrotate's truncation
    w.lines(10)
    h.settle()

    got = h.seqs()
    assert {} == duplicates(got)
    assert sorted(w.written) == sorted(got)
    assert 0 == h.counter("sigwatch_data_loss_events_total")
    assert 1 == h.counter("sigwatch_data_loss_possible_total")


def test_a_copy_seen_while_logrotate_is_still_writing_it_is_not_read(tmp_path: Path) -> None:
    """logrotate creates the copy, then fills it: the daemon sees it empty, then half
    written, then whole, before the truncation. It is never read."""
    h = _harness(tmp_path)
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    w.lines(200)
    h.pump()
    log, copy = h.logs / "app.log", h.logs / "app.log.1"
    content = log.read_bytes()
    copy.write_bytes(b"")
    h.tick(1.5)  # a rescan: the copy is found, empty
    with copy.open("ab") as fh:
        fh.write(content[:20])  # not even its first line
        fh.flush()
        h.tick()
        fh.write(content[20:len(content) // 2])
        fh.flush()
        h.tick()
        fh.write(content[len(content) // 2:])
    h.tick()
    os.truncate(log, 0)
    w.lines(10)
    h.settle()

    _exactly_once(h, w)


def test_a_new_file_named_like_a_copy_with_other_content_is_read(tmp_path: Path) -> None:
    """``app.log.new`` (another run's log, say) starts with the same banner as ``app.log``
    but is not a copy of it: every line of it is read."""
    h = _harness(tmp_path)
    banner = b"=== training job started, config v1 ===\n"
    (h.logs / "app.log").write_bytes(banner)
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    w.lines(30)
    h.pump()
    other = Writer(h.logs / "app.log.new", filler=2)
    other.seq = 1000
    other.path.write_bytes(banner[:10])
    h.tick(1.5)
    with other.path.open("ab") as fh:
        fh.write(banner[10:])
    other.lines(20)
    h.settle()

    got = h.seqs()
    assert {} == duplicates(got)
    assert sorted(w.written + other.written) == sorted(got)


@pytest.mark.parametrize("glob", [GLOB, "*.log"])
@pytest.mark.parametrize("crash", [False, True])
def test_copytruncate_while_the_daemon_is_down(tmp_path: Path, crash: bool, glob: str) -> None:
    """Stopped (or SIGKILLed) at a commit; lines written, then copytruncate, then more lines,
    all while it is down. At start the copy is known by its content (matched by the glob, or
    found next to the log as a file rotated while down): its gap is read from it, what was
    read before is not read again, nothing is counted lost."""
    h = Harness(tmp_path, (glob,))
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    w.lines(30)
    h.pump()
    h.service.commit(force=True)  # type: ignore[union-attr]
    h.crash() if crash else h.stop()
    w.lines(5)
    _copytruncate(h.logs / "app.log")
    w.lines(10)

    h.start()
    h.settle()

    _exactly_once(h, w)


def test_three_rotations_keeping_three_copies(tmp_path: Path) -> None:
    """logrotate's whole scheme three times over: the copies are renamed along (.1 to .2 to
    .3) and the oldest deleted, with lines before and after every rotation."""
    h = _harness(tmp_path)
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    for _ in range(4):
        w.lines(20)
        h.pump()
        w.lines(3)
        _copytruncate(h.logs / "app.log")
        w.lines(5)
        h.pump()
    h.settle()

    _exactly_once(h, w)


@pytest.mark.integration
def test_real_logrotate_copytruncate_with_a_glob_matching_the_copies(rig: Rig) -> None:
    """The real daemon watching ``*.log*`` and the real logrotate (``copytruncate``,
    ``rotate 3``) run four times, with lines before and after each run. Before: every
    detection came again from each copy (up to three times over)."""
    logrotate = require("logrotate")
    log = rig.logs / "train.log"
    conf = rig.root / "logrotate.conf"
    conf.write_text(f"{log} {{\n  copytruncate\n  rotate 3\n  nocompress\n  missingok\n}}\n",
                    encoding="utf-8")
    d = rig.start(watch=str(rig.logs / GLOB))
    d.wait_started()
    written: list[int] = []
    seq = 0
    for _ in range(4):
        written += write_lines(log, range(seq + 1, seq + 21))
        seq += 20
        rig.wait_seqs(written, daemon=d)
        subprocess.run([logrotate, "--force", "--state", str(rig.root / "lr.state"), str(conf)],
                       check=True, timeout=60, capture_output=True)
        written += write_lines(log, range(seq + 1, seq + 6))
        seq += 5
        rig.wait_seqs(written, daemon=d)
    # Each run's copy (train.log.1) was seen and known for a copy (it is renamed along after).
    wait_for(lambda: sum(d.stderr().count(f'"{event}"') for event in COPY_EVENTS) >= 4,
             timeout=60, what="the four copies recognised")
    lines_read = d.metric("sigwatch_lines_total")

    assert 0 == d.stop()
    got = rig.seqs()
    assert {} == dup(got)
    assert sorted(written) == sorted(got)
    assert 2 * len(written) == lines_read  # each line read once: none again from a copy
