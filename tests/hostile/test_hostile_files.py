"""Hostile file trees: names, file types, depths and links a shared scratch tree can hold.

Each test runs the real daemon on real files and states what it may lose (nothing, here) and
what it must refuse, count and keep running through.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import pytest
from support.hostile import Rig, cpu_seconds, dup, write_lines

pytestmark = pytest.mark.integration


def test_a_file_name_that_is_not_utf8_is_read_and_the_daemon_keeps_running(rig: Rig) -> None:
    """Case 1. ``job-\\xff\\xfe.log`` (Latin-1 bytes) appears next to a busy log. Before: the
    daemon crashed on it (a crash loop under systemd) and the busy log's lines written meanwhile
    were lost. Now both files are read; nothing may be lost."""
    d = rig.start()
    d.wait_started()
    bad = os.path.join(os.fsencode(rig.logs), b"job-\xff\xfe.log")
    write_lines(bad, [1])
    written = [1]
    for batch in range(5):
        written += write_lines(rig.logs / "busy.log", range(2 + batch * 20, 22 + batch * 20))
    got = rig.wait_seqs(written, daemon=d)
    assert {} == dup(got)
    assert d.alive()
    bad_events = [line for line in rig.events.read_bytes().splitlines() if b'"seq":"1"' in line]
    assert 1 == len(bad_events)
    assert b"job-" in bad_events[0]


def test_fifo_socket_and_device_under_a_glob_never_block_and_are_refused(rig: Rig) -> None:
    """Case 2. A FIFO with no writer, a UNIX socket and a character device match ``*.log``.
    Before: ``open()`` of the FIFO blocked forever (SIGTERM ignored, /metrics still answered).
    Now each is refused once with ``file_errors{reason="not_regular"}``, the regular file next
    to them is read, and SIGTERM stops the daemon at once. Nothing may be lost."""
    os.mkfifo(rig.logs / "pipe.log")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(rig.logs / "sock.log"))
    specials = 2
    try:
        os.mknod(rig.logs / "zero.log", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
        specials += 1
    except PermissionError:  # no CAP_MKNOD in this container
        pass
    written = write_lines(rig.logs / "good.log", range(1, 51))
    d = rig.start()
    try:
        got = rig.wait_seqs(written, daemon=d, timeout=120)
        assert {} == dup(got)
        refused = d.metric("sigwatch_file_errors_total", reason="not_regular")
        assert specials == refused
        started = time.monotonic()  # before: never (blocked in open); 30 s: a busy machine
        assert 0 == d.stop(timeout=30)
        assert time.monotonic() - started < 30
    finally:
        sock.close()


@pytest.mark.slow
def test_a_tree_1200_levels_deep_under_a_globstar_is_walked_without_recursion(rig: Rig) -> None:
    """Case 3a. ``logs/**/*.log`` over a chain of 1,200 nested folders with a log at the
    bottom. Before: ``RecursionError`` in the glob, a crash loop. Now the walk is iterative;
    the deepest file and the top one are both read. Nothing may be lost."""
    deep = os.fsencode(rig.logs)
    for _ in range(1200):  # os.makedirs itself recurses once per level
        deep = os.path.join(deep, b"d")
        os.mkdir(deep)
    try:
        written = write_lines(os.path.join(deep, b"bottom.log"), [1])
        written += write_lines(rig.logs / "top.log", range(2, 12))
        d = rig.start(watch=str(rig.logs / "**" / "*.log"))
        got = rig.wait_seqs(written, daemon=d, timeout=30)
        assert {} == dup(got)
        assert d.alive()
    finally:  # shutil.rmtree (pytest's clean-up) recurses once per level too
        for run in rig.running:
            run.stop()
        os.unlink(os.path.join(deep, b"bottom.log"))
        while deep != os.fsencode(rig.logs):
            os.rmdir(deep)
            deep = os.path.dirname(deep)


def test_two_symlink_loops_under_a_globstar_cost_no_cpu(rig: Rig) -> None:
    """Case 3b. Two symlink loops (``a/up -> ..``, ``b/side -> ../a``) under ``**``. Before: the
    glob expanded paths through both loops and kept a core at 100 %. Now each directory is
    walked once (loops detected by device and inode): the files are read and the idle daemon
    uses under 20 % of a core over 3 s of rescans (every second here)."""
    (rig.logs / "a").mkdir()
    (rig.logs / "b").mkdir()
    os.symlink("..", rig.logs / "a" / "up")
    os.symlink("../a", rig.logs / "b" / "side")
    written = write_lines(rig.logs / "a" / "x.log", [1])
    written += write_lines(rig.logs / "b" / "y.log", [2])
    d = rig.start(watch=str(rig.logs / "**" / "*.log"), config="rescan_interval = 1.0\n")
    got = rig.wait_seqs(written, daemon=d, timeout=120)
    assert {} == dup(got)
    before = cpu_seconds(d.pid)
    started = time.monotonic()
    while time.monotonic() - started < 3.0:
        d.d.proc.wait(timeout=0.5) if not d.alive() else time.sleep(0.1)  # noqa: S110
    share = (cpu_seconds(d.pid) - before) / (time.monotonic() - started)
    assert share < 0.2, f"idle daemon used {share:.0%} of a core"
    assert 1 == len([s for s in rig.seqs() if s == 1])


@pytest.mark.skipif(os.geteuid() != 0, reason="the policy is for a daemon running as root")
def test_a_root_daemon_does_not_follow_a_symlink_out_of_the_watched_tree(rig: Rig,
                                                                         tmp_path: Path) -> None:
    """Smaller case. ``logs/evil.log -> /outside/secret`` (a file only root may read). Before:
    a root daemon read it and quoted it in the event log. Now it is refused with
    ``file_errors{reason="outside_tree"}``; a link inside the tree is still followed; the
    option ``follow_symlinks_outside = true`` allows it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret"
    write_lines(secret, [99])
    os.chmod(secret, 0o600)
    os.symlink(secret, rig.logs / "evil.log")
    write_lines(rig.logs / "run-1.out", [1])
    os.symlink(rig.logs / "run-1.out", rig.logs / "current.log")
    d = rig.start()
    rig.wait_seqs([1], daemon=d)
    assert 1 == d.metric("sigwatch_file_errors_total", reason="outside_tree")
    assert 99 not in rig.seqs()
    d.stop()
    allowed = rig.start(config="follow_symlinks_outside = true\n", state=tmp_path / "state2",
                        events=tmp_path / "events2.jsonl")
    rig.wait_seqs([1, 99], tmp_path / "events2.jsonl", daemon=allowed)


def test_max_files_reached_is_counted_as_files_not_followed(rig: Rig) -> None:
    """Case 12. ``max_files = 5`` and 8 matching files. Before: one log line, no metric. Now
    ``sigwatch_files_not_followed{source}`` says 3 (a count; never paths as labels). The 3 are
    the declared loss of this configuration."""
    for i in range(8):
        write_lines(rig.logs / f"f{i}.log", [i + 1])
    d = rig.start(config="max_files = 5\n")
    got = rig.wait_seqs(range(1, 6), daemon=d)
    assert {} == dup(got)
    assert 3 == d.metric("sigwatch_files_not_followed", source="files")
    assert 5 == len(set(got))


def test_the_event_log_inside_a_watched_glob_is_not_followed(rig: Rig) -> None:
    """Smaller case. ``--events logs/events.log`` under ``logs/*.log``: before, the daemon read
    its own detections back (each holds the line text, so each was detected again: a loop).
    Now the event log's path is excluded from every watch: each line is detected once."""
    events = rig.logs / "events.log"
    written = write_lines(rig.logs / "app.log", range(1, 21))
    d = rig.start(events=events)
    got = rig.wait_seqs(written, events, daemon=d)
    d.wait_started()
    write_lines(rig.logs / "app.log", [21])
    got = rig.wait_seqs([*written, 21], events, daemon=d)
    assert {} == dup(rig.seqs(events))
    assert 1 == d.metric("sigwatch_files_watched", source="files")
    _ = got
