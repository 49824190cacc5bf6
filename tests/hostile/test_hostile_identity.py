"""File identity on a messy machine: rotations and symlink switches while the daemon is dead,
files replaced by look-alikes, copytruncate, a corrupt checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness import Harness, Writer, duplicates
from support.daemon import wait_for
from support.hostile import Rig, dup, write_lines

pytestmark = pytest.mark.integration


def _switch(rig: Rig, run: int) -> Path:
    """Point ``logs/current.log`` at ``runs/<run>/out.log`` (another folder), atomically."""
    target = rig.root / "runs" / str(run) / "out.log"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.touch()
    tmp = rig.logs / "current.tmp"
    os.symlink(target, tmp)
    os.replace(tmp, rig.logs / "current.log")
    return target


@pytest.mark.slow
def test_sigkill_then_rotation_and_symlink_switch_while_down_loses_nothing(rig: Rig) -> None:
    """Case 4, eight times over: the daemon reads ``current.log`` (a symlink to a run folder
    elsewhere) and ``app.log``, commits, delivers more, and is SIGKILLed; while it is down
    both files get more lines, ``app.log`` is renamed to ``app.log.<k>`` and the symlink is
    switched to a new run. Before: the roll-back cut the detections delivered after the
    commit, and the old symlink target was never found again (it is not next to the link):
    its lines were lost, counted as ``rotated_away`` though the file was still there. Nothing
    is deleted, so nothing may be lost."""
    config = "follow_symlinks_outside = true\ncheckpoint_interval = 0.5\n"  # runs are outside
    target = _switch(rig, 0)
    seq = 0
    written: list[int] = []

    def more(path: Path, n: int) -> None:
        nonlocal seq
        written.extend(write_lines(path, range(seq + 1, seq + n + 1)))
        seq += n

    d = rig.start(config=config)
    for cycle in range(1, 9):
        d.wait_started()
        # Counted before the lines are written: reading them makes the daemon dirty, so a
        # commit follows them (waiting for "one more commit" after they show up could wait
        # for a commit that already happened).
        commits = d.metric("sigwatch_checkpoint_writes_total") or 0
        more(target, 10)
        more(rig.logs / "app.log", 10)
        rig.wait_seqs(written, daemon=d)
        wait_for(lambda c=commits: (d.metric("sigwatch_checkpoint_writes_total") or 0) > c,
                 what="a commit")
        more(target, 5)  # delivered after the commit: rolled back at the restart
        more(rig.logs / "app.log", 5)
        rig.wait_seqs(written, daemon=d)
        d.kill()
        more(target, 5)  # written while down, then the switch and the rotation
        more(rig.logs / "app.log", 5)
        os.rename(rig.logs / "app.log", rig.logs / f"app.log.{cycle}")
        target = _switch(rig, cycle)
        more(target, 3)
        more(rig.logs / "app.log", 3)
        d = rig.start(config=config)
    got = rig.wait_seqs(written, daemon=d, timeout=30)
    d.wait_started()
    assert 0 == d.stop()
    got = rig.seqs()
    assert {} == dup(got)
    assert sorted(written) == sorted(got)


STARTUP = b"".join(b"INFO loading shard %02d of the dataset from /scratch/cache ok\n" % i
                   for i in range(8))


def _incident(run: int) -> bytes:
    # Same length and same last 40 bytes every run: only the seq and the pid differ.
    return (b"ERROR seq=%04d pid=%05d rank 0 lost its NCCL peer; the job exits now\n"
            % (run, 20000 + run))


def test_a_crash_looping_job_rewriting_the_same_start_up_text_is_read_every_time(
        tmp_path: Path) -> None:
    """Case 5a. A job restarts 20 times; each time it reopens its log with mode ``w`` and writes
    the same start-up text and an incident line of the same length and ending (only the seq and
    the pid differ), between two looks of the daemon. Before: the file looked unchanged (same
    size, same head, same 32-byte marker): 19 of 20 incidents were lost. Now the content
    fingerprint (a hash of up to 1 KiB before the offset) differs: each rewrite is read again.
    Nothing may be lost (each rewrite is whole before the daemon looks)."""
    h = Harness(tmp_path)
    path = h.logs / "job.log"
    h.start()
    for run in range(1, 21):
        with open(path, "wb") as fh:
            fh.write(STARTUP + _incident(run))
        h.tick()
    h.settle()
    got = h.seqs()
    assert {} == duplicates(got)
    assert list(range(1, 21)) == sorted(got)


def test_a_job_reopening_its_log_with_mode_w_and_similar_lines_loses_nothing(
        tmp_path: Path) -> None:
    """Case 5b. A job writes 77 lines, reopens its log with ``w`` and writes 77 similar lines
    (same header, same line length, same 32 bytes at the old offset), three times (231 lines);
    the daemon looks between. Before: each reopened file was taken for the old one and its
    first 77 lines skipped. Now the fingerprint before the offset differs: read from byte 0."""
    h = Harness(tmp_path)
    path = h.logs / "train.log"
    h.start()
    seq = 0
    for _ in range(3):
        with open(path, "wb") as fh:
            fh.write(b"=== training job, config v1 ===\n")
            for _ in range(77):
                seq += 1
                fh.write(b"ERROR seq=%05d step done; loss and throughput logged as usual\n" % seq)
        h.tick()
    h.settle()
    got = h.seqs()
    assert {} == duplicates(got)
    assert list(range(1, 232)) == sorted(got)


def test_a_look_alike_written_while_the_daemon_was_down_is_read_from_byte_zero(
        tmp_path: Path) -> None:
    """Case 5c. Same crash-looping job, rewritten while the daemon is stopped: the checkpoint's
    fingerprint (growing head hash, 1 KiB before the offset) tells the new file from the old
    one. Before: resumed at the old offset, the new incident was never read."""
    h = Harness(tmp_path)
    path = h.logs / "job.log"
    path.write_bytes(STARTUP + _incident(1))
    h.start()
    h.pump()
    for run in range(2, 6):
        h.stop()
        path.write_bytes(STARTUP + _incident(run))
        h.start()
        h.pump()
    h.settle()
    got = h.seqs()
    assert {} == duplicates(got)
    assert [1, 2, 3, 4, 5] == sorted(got)


def test_copytruncate_after_everything_was_read_counts_no_loss(tmp_path: Path) -> None:
    """Smaller case. logrotate's copytruncate when the daemon had read every byte: before,
    ``data_loss{reason="truncated"}`` was counted anyway (the data-loss alert cried wolf). Now
    the copy (``app.log.1``) shows that nothing was written after our last read: no loss."""
    h = Harness(tmp_path)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(30)
    h.pump()
    (h.logs / "app.log.1").write_bytes((h.logs / "app.log").read_bytes())
    os.truncate(h.logs / "app.log", 0)
    w.lines(10)
    h.settle()
    assert sorted(w.written) == sorted(h.seqs())
    assert 0 == h.losses_counted()


def test_copytruncate_gap_is_read_from_the_copy(tmp_path: Path) -> None:
    """Smaller case. Lines written after our last read and before the truncation are in the
    copy: they are read from it (no loss, nothing counted). Without a copy next to the file
    (compressed at once, say) the gap is counted, and only when bytes were seen unread."""
    h = Harness(tmp_path)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(30)
    h.pump()
    w.lines(5)  # the gap
    (h.logs / "app.log.1").write_bytes((h.logs / "app.log").read_bytes())
    os.truncate(h.logs / "app.log", 0)
    w.lines(10)
    h.settle()
    assert {} == duplicates(h.seqs())
    assert sorted(w.written) == sorted(h.seqs())
    assert 0 == h.losses_counted()


def test_a_corrupt_checkpoint_does_not_suppress_lines_written_since_the_last_good_one(
        rig: Rig) -> None:
    """Case 11. The daemon is SIGKILLed; while it is down lines are written, ``app.log`` is
    rotated to ``app.log.1`` and a new one started, and every checkpoint generation is
    corrupted (at the crash: the files keep their times). The issue's old code skipped to the
    end of every file; the runtime rework already reads every file from 0 and uses the event
    log to deliver nothing twice, but the rotated file (no checkpoint record, not matched by
    the glob) was never read: 20 lines lost, uncounted. Now files rotated away since the lost
    checkpoint are read the same way. Nothing may be lost or doubled."""
    written = write_lines(rig.logs / "app.log", range(1, 41))
    d = rig.start()
    rig.wait_seqs(written, daemon=d)
    d.wait_started()
    written += write_lines(rig.logs / "app.log", range(41, 61))
    rig.wait_seqs(written, daemon=d)
    d.kill()
    written += write_lines(rig.logs / "app.log", range(61, 81))
    os.rename(rig.logs / "app.log", rig.logs / "app.log.1")  # rotated while down
    written += write_lines(rig.logs / "app.log", range(81, 86))
    written += write_lines(rig.logs / "new.log", range(86, 91))
    for name in ("checkpoint.json", "checkpoint.json.prev", "checkpoint.json.tmp"):
        path = rig.state / name
        if path.exists():  # corrupted at the crash: the files keep their times
            st = path.stat()
            path.write_bytes(b"\0" * 64)
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    d = rig.start()
    d.wait_started()
    rig.wait_seqs(written, daemon=d)
    wait_for(lambda: (d.metric("sigwatch_lines_total") or 0) >= 2 * 90, what="all read")
    assert 1 == d.metric("sigwatch_checkpoint_recoveries_total", mode="corrupt")
    assert 0 == d.stop()
    got = rig.seqs()
    assert sorted(written) == sorted(set(got))
    assert {} == dup(got)
