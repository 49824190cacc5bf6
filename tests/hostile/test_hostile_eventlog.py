"""The event log on a hostile machine: a full disk, logrotate (copytruncate, rename + SIGHUP),
an operator deleting it, a second daemon on the same state directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import wait_for
from support.hostile import Rig, dup, events_json_errors, write_lines

pytestmark = pytest.mark.integration


@pytest.fixture(name="small_disk")
def _small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (mounted by the test, root only)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                            capture_output=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {result.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(folder: Path, leave: int) -> Path:
    """Fill ``folder``'s file system but ``leave`` bytes."""
    filler = folder / "filler"
    st = os.statvfs(folder)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as fh:
        try:
            fh.write(b"\0" * max(0, free - leave))
        except OSError:
            pass
    return filler


def test_a_full_disk_under_the_event_log_loses_no_detection(rig: Rig, small_disk: Path) -> None:
    """Case 7. The event log's file system fills up while 270 detections are due. Before: 197
    of 270 were lost, uncounted. Now write errors are counted, the pump stops reading until
    the event log can be written (the checkpoint never passes what it holds), and resumes
    when space returns; a SIGKILL while the disk is full changes nothing. Nothing may be lost."""
    events = small_disk / "events.jsonl"
    filler = _fill(small_disk, leave=8 << 10)
    d = rig.start(events=events)
    d.wait_started()
    written = write_lines(rig.logs / "app.log", range(1, 271))
    wait_for(lambda: (d.metric("sigwatch_eventlog_write_errors_total") or 0) > 0,
             what="a counted write error")
    d.kill()  # while full: what was read and not written must not be committed
    d = rig.start(events=events)
    wait_for(lambda: (d.metric("sigwatch_eventlog_write_errors_total") or 0) > 0,
             what="a counted write error after the restart")
    filler.unlink()
    got = rig.wait_seqs(written, events, daemon=d)
    assert {} == dup(got)
    assert 0 == events_json_errors(events)


def test_a_second_daemon_on_the_same_state_directory_is_refused(rig: Rig) -> None:
    """Case 8. A second ``sigwatch run`` on the same state directory. Before: both ran,
    reported everything twice and overwrote each other's checkpoint. Now the second exits with
    status 2 and one line naming the directory (the first holds an ``flock`` for its life)."""
    first = rig.start()
    first.wait_started()
    second = rig.start()
    assert 2 == second.d.proc.wait(timeout=120)
    lines = [ln for ln in second.stderr().splitlines() if ln.strip()]
    assert 1 == len(lines), lines
    assert str(rig.state) in lines[0]
    written = write_lines(rig.logs / "app.log", range(1, 51))
    got = rig.wait_seqs(written, daemon=first)
    assert {} == dup(got)
    assert 0 == first.stop()


def test_event_log_copytruncated_then_sigkill_gives_no_duplicate_and_no_torn_line(
        rig: Rig) -> None:
    """Case 9. logrotate copytruncate of the event log (``events.jsonl`` copied to
    ``events.jsonl.1`` and truncated) between two checkpoints, then SIGKILL. Before: the
    replay wrote again what the copy held past the commit (duplicates), and a record cut by the
    truncation could leave a torn JSON line. Now records are written whole, and at start-up
    the roll-back cuts the truncated file (all of it is newer than the commit) and the copy
    (found by the hash of the committed bytes) back to the commit. Across both files: every
    detection once, every line JSON."""
    d = rig.start(config="checkpoint_interval = 3\n")
    d.wait_started()
    written = write_lines(rig.logs / "app.log", range(1, 101))
    rig.wait_seqs(written, daemon=d)
    commits = d.metric("sigwatch_checkpoint_writes_total") or 0
    wait_for(lambda: (d.metric("sigwatch_checkpoint_writes_total") or 0) > commits,
             what="a commit holding 1..100")
    written += write_lines(rig.logs / "app.log", range(101, 121))
    rig.wait_seqs(written, daemon=d)
    copy = rig.root / "events.jsonl.1"
    shutil.copyfile(rig.events, copy)
    os.truncate(rig.events, 0)
    d.kill()
    d = rig.start()
    d.wait_started()
    written += write_lines(rig.logs / "app.log", range(121, 151))
    rig.wait_seqs(range(121, 151), daemon=d)
    assert 0 == d.stop()
    got = rig.seqs(rig.events, copy)
    assert sorted(written) == sorted(set(got))
    assert {} == dup(got)
    assert 0 == events_json_errors(rig.events) + events_json_errors(copy)


def test_a_deleted_event_log_is_recreated_and_nothing_goes_to_the_unlinked_file(
        rig: Rig) -> None:
    """Case 10. The event log is deleted under the running daemon. Before: detections kept
    going to the unlinked inode, invisible; nothing noticed. Now the path is checked before
    each write: the file is recreated, the reopen counted, and the next detections are in it."""
    d = rig.start()
    d.wait_started()
    rig.wait_seqs(write_lines(rig.logs / "app.log", range(1, 11)), daemon=d)
    rig.events.unlink()
    later = write_lines(rig.logs / "app.log", range(11, 31))
    got = rig.wait_seqs(later, daemon=d)
    assert sorted(later) == sorted(got)
    assert 1 == d.metric("sigwatch_eventlog_reopens_total", reason="deleted")


def test_event_log_renamed_by_logrotate_is_reopened_on_sighup(rig: Rig) -> None:
    """Case 10 (logrotate ``create`` + ``postrotate kill -HUP``). Before: the daemon kept writing
    to the renamed file. Now SIGHUP (and the path check) reopens: new detections go to the new
    file, none are lost or doubled across the two."""
    d = rig.start()
    d.wait_started()
    first = write_lines(rig.logs / "app.log", range(1, 11))
    rig.wait_seqs(first, daemon=d)
    rotated = rig.root / "events.jsonl.1"
    os.rename(rig.events, rotated)
    rig.events.write_bytes(b"")
    d.d.signal(signal.SIGHUP)
    later = write_lines(rig.logs / "app.log", range(11, 31))
    got = rig.wait_seqs(later, daemon=d)
    assert sorted(later) == sorted(got)
    assert sorted(first) == sorted(rig.seqs(rotated))
