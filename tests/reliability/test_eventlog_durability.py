"""The event log as a disk and its readers see it: durable before it is committed, and never
half a record.

Two observers watch the real runtime's system calls (the calls go through; the observers
only record):

* **a disk that loses what was not fsynced** (a power cut): per file, the size at its last
  ``fsync``. When a checkpoint is committed (the rename of ``checkpoint.json.tmp``), the event
  log's size it records must already be durable: after a power cut, a detection the
  checkpoint counts as committed would otherwise be gone, and never written again (the lines
  behind it are past the committed offsets);
* **a reader at every instant** (logrotate's copy, a log shipper): after each ``write`` to the
  event log, the file must end with a whole record. Written in slices, a reader that copies
  or ships the file between two slices gets a torn record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from harness import Harness, Writer, duplicates

from sigwatch.sources.files import TailOptions


class DiskModel:
    """Records, per inode, the size at the last fsync; checks every checkpoint commit."""

    def __init__(self, events: Path, checkpoint: Path) -> None:
        self.events = events
        self.checkpoint = checkpoint
        self.durable: dict[tuple[int, int], int] = {}
        self.commits: list[tuple[int, int]] = []  # (committed size, durable size)
        self.writes = 0
        self.torn: list[bytes] = []

    def fsync(self, real: Callable[[int], None]) -> Callable[[int], None]:
        def fsync(fd: int) -> None:
            real(fd)
            st = os.fstat(fd)
            self.durable[(st.st_dev, st.st_ino)] = st.st_size
        return fsync

    def replace(self, real: Callable[..., None]) -> Callable[..., None]:
        def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str],
                    *args: object, **kw: object) -> None:
            if Path(dst) == self.checkpoint:
                self._check_commit(Path(src))
            real(src, dst, *args, **kw)
        return replace

    def write(self, real: Callable[[int, bytes], int]) -> Callable[[int, bytes], int]:
        def write(fd: int, data: bytes) -> int:
            done = real(fd, data)
            if self._is_event_log(fd):
                self.writes += 1
                size = os.fstat(fd).st_size
                last = os.pread(fd, 1, size - 1) if size else b"\n"
                if last != b"\n":
                    self.torn.append(os.pread(fd, 200, max(0, size - 200)))
            return done
        return write

    def _is_event_log(self, fd: int) -> bool:
        try:
            st, ours = os.fstat(fd), os.stat(self.events)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino)

    def _check_commit(self, new_checkpoint: Path) -> None:
        body = json.loads(new_checkpoint.read_bytes())["body"]
        log = body.get("event_log")
        if not log:
            return
        durable = self.durable.get((log["dev"], log["ino"]), 0)
        self.commits.append((log["size"], durable))


@pytest.fixture(name="disk")
def _disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DiskModel]:
    root = tmp_path / "h0"
    model = DiskModel(root / "events.jsonl", root / "state" / "checkpoint.json")
    monkeypatch.setattr(os, "fsync", model.fsync(os.fsync))
    monkeypatch.setattr(os, "replace", model.replace(os.replace))
    monkeypatch.setattr(os, "write", model.write(os.write))
    yield model


def _harness(make_harness: Callable[..., Harness]) -> Harness:
    # fsync on, as the daemon runs (the other reliability tests leave it off for speed).
    return make_harness(fsync=True, options=TailOptions(
        poll_interval=1.0, rescan_interval=1.0, checkpoint_interval=1.0, rotate_wait=5.0,
        read_budget=64 << 10))


def test_every_committed_detection_was_on_disk_before_the_checkpoint_said_so(
        make_harness: Callable[..., Harness], disk: DiskModel) -> None:
    """Detections written in many batches, commits in between, a crash and a restart: at
    each commit the event log's recorded size was fsynced first."""
    h = _harness(make_harness)
    w = Writer(h.logs / "app.log", filler=3)
    h.start()
    for _ in range(8):
        w.lines(40, pad=300)
        h.pump()
        h.tick(1.5)  # past the checkpoint interval: a commit
    h.restart(crash=True)
    w.lines(40, pad=300)
    h.settle()

    assert len(disk.commits) >= 8
    assert [] == [(size, durable) for size, durable in disk.commits if size > durable]
    assert {} == duplicates(h.seqs())
    assert sorted(w.written) == sorted(h.seqs())


def test_a_reader_of_the_event_log_never_sees_half_a_record(
        make_harness: Callable[..., Harness], disk: DiskModel) -> None:
    """Records of about 1 KiB, hundreds per batch: after every write the file ends with a
    whole record."""
    h = _harness(make_harness)
    w = Writer(h.logs / "app.log")
    h.start()
    for _ in range(5):
        w.lines(200, pad=900)
        h.pump()
    h.settle()

    assert disk.writes >= 5
    assert [] == disk.torn
    assert sorted(w.written) == sorted(h.seqs())
