"""The reliability checklist (research/anchors-tailing-reliability.md §7.2) as runnable scenarios.

Each scenario drives the real runtime through a ``Harness`` (fake clock) and returns a
``Result``: lines written, lines detected, duplicates, and the lost lines split exactly:
``lost_declared`` are lines the scenario says in advance it may lose, and why (the copytruncate
gap, a file deleted while the daemon was down), and the daemon must have counted that loss under
that reason; ``lost_silent`` is every other missing line. The tests fail on any duplicate and on
any line lost that the scenario did not declare, so a fault that drops more than the gap fails.
``bench/reliability.py`` prints the table.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness import Harness, Writer, duplicates, error_line

from sigwatch.runtime.checkpoint import CheckpointStore
from sigwatch.sources.files import TailOptions


@dataclass
class Result:
    name: str
    written: int
    matched: int
    lost_declared: int  # lost, declared by the scenario, and counted under the declared reason
    lost_silent: int  # every other missing line: always a failure
    duplicated: int
    p99_latency: float | None  # seconds (fake clock: poll passes x 1 s); None: not measured
    notes: str = ""


@dataclass(frozen=True)
class MayLose:
    """Lines a scenario may lose, and the ``data_loss`` reasons the daemon may count it under."""

    seqs: frozenset[int]
    reasons: frozenset[str]


def _result(name: str, h: Harness, written: list[int], latencies: list[float] | None = None,
            notes: str = "", may_lose: MayLose | None = None) -> Result:
    got = h.seqs()
    dup = sum(c - 1 for c in duplicates(got).values())
    missing = set(written) - set(got)
    declared = missing & may_lose.seqs if may_lose else set()
    if declared and may_lose and not any(
            h.counter("sigwatch_data_loss_events_total", reason=r) for r in may_lose.reasons):
        declared = set()  # lost as foreseen, but the daemon did not say so: silent
    lat = sorted(latencies or [])
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None
    return Result(name, len(written), len(set(got) & set(written)), len(declared),
                  len(missing) - len(declared), dup, p99, notes)


def _timed(h: Harness, w: Writer, n: int, lat: list[float], **kw: int) -> None:
    """Write n lines, then count the passes until they are all detected."""
    seqs = set(w.lines(n, **kw))
    for passes in range(1, 200):
        h.tick()
        if seqs <= set(h.seqs()):
            lat.extend([passes * h.options.poll_interval] * len(seqs))
            return
    raise AssertionError("lines not detected within 200 passes")


# -- scenarios -----------------------------------------------------------------------------------

def steady_append(root: Path) -> Result:
    """#1: steady appends to one file."""
    h = Harness(root)
    w = Writer(h.logs / "app.log", filler=3)
    h.start()
    lat: list[float] = []
    for _ in range(50):
        _timed(h, w, 20, lat)
    h.settle()
    return _result("steady_append", h, w.written, lat)


def burst(root: Path) -> Result:
    """#2: a burst far bigger than one read budget, consumed in bounded slices."""
    h = Harness(root, options=TailOptions(poll_interval=1, rescan_interval=1,
                                          read_budget=256 << 10))
    w = Writer(h.logs / "app.log", filler=20)
    h.start()
    w.lines(20_000)  # ~9 MB
    h.settle()
    return _result("burst", h, w.written, notes="read in 256 KiB slices")


def rename_rotation(root: Path) -> Result:
    """#3: mv app.log app.log.1 while the writer keeps writing to the old file, then new."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(50)
    h.tick()
    os.rename(h.logs / "app.log", h.logs / "app.log.1")
    w.to(h.logs / "app.log.1").lines(20)
    h.tick()
    w.to(h.logs / "app.log.1").lines(5)
    w.to(h.logs / "app.log").lines(30)
    h.settle()
    return _result("rename_rotation", h, w.written)


def rapid_rotation(root: Path) -> Result:
    """#4: a rotation between almost every pass, 3 files, 5 generations kept."""
    h = Harness(root, ("*.log",))
    writers = [Writer(h.logs / f"f{i}.log") for i in range(3)]
    h.start()
    written: list[int] = []
    for i, w in enumerate(writers):
        w.seq = i * 1_000_000
    for round_ in range(60):
        for w in writers:
            w.lines(5)
            base = w.path
            for gen in range(4, 0, -1):
                src = Path(f"{base}.{gen}")
                if src.exists():
                    os.rename(src, f"{base}.{gen + 1}")
            os.rename(base, f"{base}.1")
            w.lines(1)  # the application reopens its log
        if round_ % 2:
            h.tick()
    for w in writers:
        w.lines(1)
        written += w.written
    h.settle()
    return _result("rapid_rotation", h, written,
                   notes="5 generations kept; gen 6 deleted only after it was read")


def rotation_while_down(root: Path) -> Result:
    """#5: rotated once and then twice more while the daemon was stopped."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(20)
    h.pump()
    h.stop()
    w.lines(10)
    for _ in range(3):
        for gen in (2, 1):
            src = h.logs / f"app.log.{gen}"
            if src.exists():
                os.rename(src, h.logs / f"app.log.{gen + 1}")
        os.rename(h.logs / "app.log", h.logs / "app.log.1")
        w.lines(10)
    h.start()
    h.settle()
    return _result("rotation_while_down", h, w.written)


def rotated_away_twice_while_down(root: Path) -> Result:
    """#5b: the file we were reading was rotated and deleted while we were down."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(20)
    h.pump()
    h.crash()
    gone = w.lines(10)  # never read: deleted below
    os.rename(h.logs / "app.log", h.logs / "app.log.1")
    os.unlink(h.logs / "app.log.1")
    w.lines(10)
    h.start()
    h.settle()
    return _result("rotated_away_twice_while_down", h, w.written,
                   notes="loss unavoidable; data_loss{reason=rotated_away}",
                   # The deleted file's inode is often reused by the new app.log: then the daemon
                   # sees the file it followed changed while it was down. Both are true.
                   may_lose=MayLose(frozenset(gone),
                                    frozenset({"rotated_away", "changed_while_down"})))


def copytruncate(root: Path) -> Result:
    """#6: copy then truncate; lines written between our last read and the truncation are
    read from the copy (found next to the file by the bytes before our offset)."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(30)
    h.pump()
    gap = w.lines(5)  # the gap: copied to app.log.1 but never read from app.log
    (h.logs / "app.log.1").write_bytes((h.logs / "app.log").read_bytes())
    os.truncate(h.logs / "app.log", 0)
    w.lines(30)
    h.settle()
    return _result("copytruncate", h, w.written,
                   notes="gap read from the copy app.log.1",
                   may_lose=MayLose(frozenset(gap), frozenset({"truncated"})))


def copytruncate_without_copy(root: Path) -> Result:
    """#6b: truncated with no copy next to it, while bytes we had seen were still unread (a
    small read budget): those bytes are lost and counted; nothing else is."""
    h = Harness(root, options=TailOptions(poll_interval=1, rescan_interval=1,
                                          read_budget=4096))
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(30)
    h.pump()
    unread = w.lines(300)  # ~6 KiB: one pass reads 4 KiB of it, and sees the size
    h.tick()
    os.truncate(h.logs / "app.log", 0)
    w.lines(30)
    h.settle()
    return _result("copytruncate_without_copy", h, w.written,
                   notes="bytes seen unread counted: data_loss{reason=truncated}",
                   may_lose=MayLose(frozenset(unread), frozenset({"truncated"})))


def copytruncate_nul_hole(root: Path) -> Result:
    """#7: a non-O_APPEND writer keeps its position after truncation: a hole of NULs."""
    h = Harness(root)
    path = h.logs / "app.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    seqs = []
    for i in range(1, 21):
        os.write(fd, error_line(i))
        seqs.append(i)
    h.start()
    h.pump()
    os.truncate(path, 0)
    for i in range(21, 41):
        os.write(fd, error_line(i))
        seqs.append(i)
    os.close(fd)
    h.settle()
    nul = h.counter("sigwatch_nul_bytes_skipped_total")
    return _result("copytruncate_nul_hole", h, seqs, notes=f"NUL bytes counted: {int(nul)}")


def truncate_rewrite_larger(root: Path) -> Result:
    """#8: truncated and rewritten past the old offset before the next poll."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(10)
    h.pump()
    os.truncate(h.logs / "app.log", 0)
    w.lines(40)
    h.settle()
    return _result("truncate_rewrite_larger", h, w.written)


def offline_truncate(root: Path) -> Result:
    """#9: truncated and rewritten while down: shorter, longer, same first line."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    (h.logs / "app.log").write_bytes(b"=== run header ===\n")
    h.start()
    written: list[int] = []
    for new_lines in (3, 40, 10):
        w.lines(10)
        h.pump()
        h.stop()
        path = h.logs / "app.log"
        os.truncate(path, 0)
        if new_lines == 10:  # same head line as before, new content after it
            path.write_bytes(b"=== run header ===\n")
        w.lines(new_lines)
        h.start()
        h.pump()
    h.settle()
    written = w.written
    return _result("offline_truncate", h, written)


def delete_while_open(root: Path) -> Result:
    """#10: deleted with a lot unread: drained through the open fd, then released."""
    h = Harness(root, options=TailOptions(poll_interval=1, rescan_interval=1,
                                          read_budget=64 << 10, rotate_wait=5))
    w = Writer(h.logs / "app.log", filler=10)
    h.start()
    w.lines(10)
    h.tick()
    w.lines(3000)
    os.unlink(h.logs / "app.log")
    h.settle()
    held = sum(len(t.streams()) for t in h.files.tailers.values()) if h.service else 0
    assert held == 0, "deleted file still held after rotate_wait"
    return _result("delete_while_open", h, w.written)


def delete_recreate(root: Path) -> Result:
    """#11: delete and recreate the same path, running and while down (inode reuse)."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(10)
    h.pump()
    os.unlink(h.logs / "app.log")
    w.lines(10)
    h.settle()
    h.stop()
    os.unlink(h.logs / "app.log")
    w.lines(15)
    h.start()
    h.settle()
    return _result("delete_recreate", h, w.written)


def atomic_replace(root: Path) -> Result:
    """#12: write a temp file and rename it over the path: (a) same prefix plus more, (b) new."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(10)
    h.pump()
    tmp = h.logs / "app.tmp"
    old = (h.logs / "app.log").read_bytes()
    w.to(tmp).lines(5)
    tmp.write_bytes(old + tmp.read_bytes())
    os.rename(tmp, h.logs / "app.log")
    h.pump()
    # (a) re-reads the copied prefix: those are the same lines in a new file. Count them as
    # written once more so the check is "new lines once, old prefix once per file".
    w.to(tmp).lines(5)
    os.rename(tmp, h.logs / "app.log")
    h.settle()
    got = h.seqs()
    dup = duplicates(got)
    expected_dup = set(range(1, 11))  # prefix replayed from the new file (documented)
    extra = {s: c for s, c in dup.items() if s not in expected_dup or c > 2}
    r = _result("atomic_replace", h, w.written)
    r.duplicated = sum(c - 1 for c in extra.values())
    r.notes = "(a) a new inode with an old prefix is a new file: prefix read again"
    return r


def symlink_switch(root: Path) -> Result:
    """#13: current.log points at run-1.log, then at run-2.log; only the link is watched."""
    h = Harness(root, ("current.log",))
    w = Writer(h.logs / "run-1.log")
    w.lines(5)
    os.symlink(h.logs / "run-1.log", h.logs / "current.log")
    h.start()
    h.pump()
    w.lines(5)
    w2 = Writer(h.logs / "run-2.log")
    w2.seq = 1000
    w2.lines(5)
    os.symlink(h.logs / "run-2.log", h.logs / "cur.tmp")
    os.rename(h.logs / "cur.tmp", h.logs / "current.log")
    w.lines(3)  # the old target is still drained
    w2.lines(5)
    h.settle()
    return _result("symlink_switch", h, w.written + w2.written)


def partial_line(root: Path) -> Result:
    """#14: a line without its newline, completed later, across a crash, and deleted."""
    h = Harness(root)
    path = h.logs / "app.log"
    h.start()
    with open(path, "ab") as fh:
        fh.write(b"ERROR seq=1 par")
    h.pump()
    with open(path, "ab") as fh:
        fh.write(b"tial\nERROR seq=2 half")
    h.pump()
    h.crash()
    h.start()
    h.pump()
    with open(path, "ab") as fh:
        fh.write(b"\nERROR seq=3 never finished")
    h.pump()
    os.unlink(path)
    h.settle()
    return _result("partial_line", h, [1, 2, 3], notes="deleted case emitted unterminated")


def graceful_restart(root: Path) -> Result:
    """#15: stop and start between every batch of writes."""
    h = Harness(root)
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    for i in range(50):
        w.lines(10)
        if i % 3:
            h.tick()
        h.restart()
    h.settle()
    return _result("graceful_restart", h, w.written)


def crash_restart(root: Path) -> Result:
    """#16: crash after every pass, committed or not."""
    h = Harness(root, options=TailOptions(poll_interval=1, rescan_interval=1,
                                          checkpoint_interval=3))
    w = Writer(h.logs / "app.log", filler=2)
    h.start()
    for i in range(50):
        w.lines(10)
        for _ in range(i % 4):
            h.tick()
        h.restart(crash=True)
    h.settle()
    return _result("crash_restart", h, w.written)


def corrupt_checkpoint(root: Path, kind: str) -> Result:
    """#17: the checkpoint is empty, truncated, NUL-filled, garbage, or wrong version."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(20)
    h.pump()
    w.lines(5)
    h.tick()
    h.crash()
    cp = h.state / "checkpoint.json"
    raw = cp.read_bytes()
    bad = {"empty": b"", "truncated": raw[: len(raw) // 2], "nul": b"\0" * len(raw),
           "garbage": b"{not json", "version": raw.replace(b'"version":1', b'"version":9')}
    for name in ("checkpoint.json", "checkpoint.json.prev", "checkpoint.json.tmp"):
        p = h.state / name
        if p.exists() or name == "checkpoint.json":
            p.write_bytes(bad[kind])
    w.lines(10)
    h.start()
    h.settle()
    mode = "corrupt" if h.counter("sigwatch_checkpoint_recoveries_total", mode="corrupt") else "?"
    return _result(f"corrupt_checkpoint_{kind}", h, w.written, notes=f"recovery mode {mode}")


def checkpoint_unwritable(root: Path) -> Result:
    """#18: the state dir cannot be written (simulated: ``CheckpointStore.save`` raises)."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    assert h.service is not None
    store = h.service.store
    assert isinstance(store, CheckpointStore)
    real = store.save

    def full(_cp: object) -> None:
        raise OSError(28, "No space left on device")

    store.save = full  # type: ignore[method-assign]
    for _ in range(5):
        w.lines(10)
        h.tick()
    errors = h.counter("sigwatch_checkpoint_errors_total")
    store.save = real  # type: ignore[method-assign]
    w.lines(10)
    h.tick()
    h.restart(crash=True)
    h.settle()
    return _result("checkpoint_unwritable", h, w.written, notes=f"checkpoint errors {errors:.0f}")


def long_lines(root: Path) -> Result:
    """#19: 1 MiB and 20 MiB lines between normal lines; then a restart."""
    h = Harness(root, options=TailOptions(poll_interval=1, rescan_interval=1,
                                          max_line_bytes=64 << 10, read_budget=1 << 20))
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(5)
    with open(h.logs / "app.log", "ab") as fh:
        fh.write(b"x" * (1 << 20) + b"\n")
        fh.write(b"ERROR seq=6 " + b"y" * (20 << 20) + b"\n")
    w.seq = 6
    w.written.append(6)
    w.lines(5)
    h.pump()
    h.restart()
    h.settle()
    cut = h.counter("sigwatch_lines_truncated_total")
    return _result("long_lines", h, w.written, notes=f"lines cut to 64 KiB: {cut:.0f}")


def binary_garbage(root: Path) -> Result:
    """#20: random bytes appended between numbered lines."""
    h = Harness(root)
    w = Writer(h.logs / "app.log")
    h.start()
    rnd = os.urandom(4 << 20)
    w.lines(5)
    with open(h.logs / "app.log", "ab") as fh:
        fh.write(rnd + b"\n")
    w.lines(5)
    h.settle()
    return _result("binary_garbage", h, w.written)


def invalid_utf8_split(root: Path) -> Result:
    """#21: invalid UTF-8 and a 4-byte emoji split across two reads."""
    h = Harness(root)
    path = h.logs / "app.log"
    h.start()
    emoji = "🔥".encode()
    with open(path, "ab") as fh:
        fh.write(b"ERROR seq=1 \xff\xfe lone \x80 bytes\nERROR seq=2 " + emoji[:2])
    h.pump()
    with open(path, "ab") as fh:
        fh.write(emoji[2:] + b"\nERROR seq=3 \xc0\xaf overlong\n")
    h.settle()
    return _result("invalid_utf8_split", h, [1, 2, 3])


def crlf_empty(root: Path) -> Result:
    """#22: CRLF endings, empty lines, a file of only newlines."""
    h = Harness(root)
    (h.logs / "blank.log").write_bytes(b"\n" * 1000)
    (h.logs / "app.log").write_bytes(b"ERROR seq=1\r\n\r\n\nERROR seq=2\r\n")
    h.start()
    h.settle()
    return _result("crlf_empty", h, [1, 2])


def many_files(root: Path) -> Result:
    """#24: 2,000 files under a ** glob, 50 of them active."""
    h = Harness(root, ("**/*.log",), options=TailOptions(poll_interval=1, rescan_interval=1))
    writers = []
    for i in range(2000):
        folder = h.logs / f"d{i % 20}"
        folder.mkdir(exist_ok=True)
        w = Writer(folder / f"f{i}.log")
        w.seq = i * 1000
        w.lines(1)
        writers.append(w)
    h.start()
    t0 = time.monotonic()
    h.pump()
    for w in writers[:50]:
        w.lines(3)
    h.settle()
    _ = t0
    return _result("many_files", h, [s for w in writers for s in w.written])


def fd_exhaustion(root: Path) -> Result:
    """#25: opens fail with EMFILE for a while (simulated: ``os.open`` raises for every other
    file); nothing is reported deleted and every line is read once when opens work again."""
    from sigwatch.sources import file as file_mod

    h = Harness(root)
    writers = [Writer(h.logs / f"f{i}.log") for i in range(20)]
    for i, w in enumerate(writers):
        w.seq = i * 1000
        w.lines(3)
    real = file_mod._open_readonly  # noqa: SLF001
    calls = {"n": 0}

    def flaky(path: str, *rest: object):  # noqa: ANN202
        calls["n"] += 1
        if calls["n"] % 2:
            raise OSError(24, "Too many open files", path)
        return real(path, *rest)

    file_mod._open_readonly = flaky  # noqa: SLF001
    try:
        h.start()
        for w in writers:
            w.lines(2)
        for _ in range(4):
            h.tick()
    finally:
        file_mod._open_readonly = real  # noqa: SLF001
    h.settle()
    errs = h.counter("sigwatch_file_errors_total", reason="fd_limit")
    return _result("fd_exhaustion", h, [s for w in writers for s in w.written],
                   notes=f"fd_limit errors {errs:.0f}")


def permission_flip(root: Path) -> Result:
    """#36: unreadable at start, readable later (simulated: root ignores mode bits, so
    ``_open_readonly`` raises EACCES for the file until the flip)."""
    from sigwatch.sources import file as file_mod

    h = Harness(root)
    w = Writer(h.logs / "app.log")
    w.lines(5)
    real = file_mod._open_readonly  # noqa: SLF001
    denied = {"on": True}

    def guarded(path: str, *rest: object):  # noqa: ANN202
        if denied["on"]:
            raise PermissionError(13, "Permission denied", path)
        return real(path, *rest)

    file_mod._open_readonly = guarded  # noqa: SLF001
    try:
        h.start()
        h.pump()
        w.lines(5)
        h.pump()
        denied["on"] = False
        h.pump()
    finally:
        file_mod._open_readonly = real  # noqa: SLF001
    w.lines(5)
    h.settle()
    errs = h.counter("sigwatch_file_errors_total", reason="permission")
    return _result("permission_flip", h, w.written, notes=f"permission errors {errs:.0f}")


def small_files(root: Path) -> Result:
    """#29: files smaller than the fingerprint, one without a newline, across a restart."""
    h = Harness(root)
    (h.logs / "a.log").write_bytes(b"ERROR seq=1\n")
    (h.logs / "b.log").write_bytes(b"ERROR seq=2")
    h.start()
    h.pump()
    h.restart()
    with open(h.logs / "b.log", "ab") as fh:
        fh.write(b"\nERROR seq=3\n")
    h.settle()
    return _result("small_files", h, [1, 2, 3])


def identical_heads(root: Path) -> Result:
    """#30: many files with the same first line; offsets never cross."""
    h = Harness(root)
    writers = []
    for i in range(20):
        path = h.logs / f"r{i}.log"
        path.write_bytes(b"=== job started, config v1 ===\n")
        w = Writer(path)
        w.seq = i * 1000
        writers.append(w)
    h.start()
    for round_ in range(5):
        for w in writers:
            w.lines(2)
        h.tick()
        if round_ == 2:
            h.restart(crash=True)
    h.settle()
    return _result("identical_heads", h, [s for w in writers for s in w.written])


def start_at_end(root: Path) -> Result:
    """#40: start at the end of existing files; files that appear later are read from 0."""
    h = Harness(root, start_at="end")
    old = Writer(h.logs / "old.log")
    old.lines(10)  # before the first start: skipped by design
    h.start()
    old.written.clear()
    old.lines(5)
    new = Writer(h.logs / "new.log")
    new.seq = 1000
    new.lines(5)
    h.settle()
    return _result("start_at_end", h, old.written + new.written)


def hostile_regex(root: Path) -> Result:
    """A signature that backtracks catastrophically: stopped per call, counted, pipeline goes on."""
    h = Harness(root, hostile=True, regex_timeout=0.02)
    w = Writer(h.logs / "app.log")
    h.start()
    w.lines(5)
    with open(h.logs / "app.log", "ab") as fh:
        for _ in range(3):
            fh.write(b"a" * 40 + b"!\n")
    w.lines(5)
    h.settle()
    t = h.counter("sigwatch_regex_timeouts_total")
    return _result("hostile_regex", h, w.written, notes=f"regex timeouts {t:.0f}")


SCENARIOS: list[tuple[str, Callable[[Path], Result]]] = [
    ("steady_append", steady_append),
    ("burst", burst),
    ("rename_rotation", rename_rotation),
    ("rapid_rotation", rapid_rotation),
    ("rotation_while_down", rotation_while_down),
    ("rotated_away_twice_while_down", rotated_away_twice_while_down),
    ("copytruncate", copytruncate),
    ("copytruncate_without_copy", copytruncate_without_copy),
    ("copytruncate_nul_hole", copytruncate_nul_hole),
    ("truncate_rewrite_larger", truncate_rewrite_larger),
    ("offline_truncate", offline_truncate),
    ("delete_while_open", delete_while_open),
    ("delete_recreate", delete_recreate),
    ("atomic_replace", atomic_replace),
    ("symlink_switch", symlink_switch),
    ("partial_line", partial_line),
    ("graceful_restart", graceful_restart),
    ("crash_restart", crash_restart),
    *[(f"corrupt_checkpoint_{k}", (lambda k: lambda r: corrupt_checkpoint(r, k))(k))
      for k in ("empty", "truncated", "nul", "garbage", "version")],
    ("checkpoint_unwritable", checkpoint_unwritable),
    ("long_lines", long_lines),
    ("binary_garbage", binary_garbage),
    ("invalid_utf8_split", invalid_utf8_split),
    ("crlf_empty", crlf_empty),
    ("many_files", many_files),
    ("fd_exhaustion", fd_exhaustion),
    ("permission_flip", permission_flip),
    ("small_files", small_files),
    ("identical_heads", identical_heads),
    ("start_at_end", start_at_end),
    ("hostile_regex", hostile_regex),
]
