"""Watching that scales: inotify on the directories a glob can match, and nothing else.

A recursive watch on the fixed prefix of ``/scratch/*/logs/*.out`` watches every folder of the
scratch file system (checkpoints, data sets): tens of thousands of watches whose events are
all noise. Here each glob is walked level by level and only the folders it can match are
watched: ``/scratch`` (a new job folder may appear), each ``/scratch/<job>`` (its ``logs`` may
appear) and each ``/scratch/<job>/logs`` (where the files are). ``**`` still needs everything
below it. The plan is recomputed when a watched folder gains or loses a folder.

One inotify instance per glob (a *tree*), read by one thread that only records which paths
changed and wakes the pump. Events stay hints: the file source's own stat and read decide.
When a tree's queue overflows (``IN_Q_OVERFLOW``: events were lost), or a watch cannot be
added (``max_user_watches``), that tree falls back to polling, said once (a structured log
line and ``sigwatch_watch_overflows_total``); a tree whose folders are all watched is
*covered*, and the file source then checks its quiet files only as a slow safety net.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fnmatch
import glob
import os
import select
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Generic, Protocol, TypeVar

import structlog

from sigwatch.sources.discovery import walk_tree

__all__ = [
    "SAFETY_INTERVAL",
    "SAFETY_RESCAN",
    "Hints",
    "InotifyHints",
    "SafetyNet",
    "TreePlan",
    "plan_directories",
    "unmatched_globs",
]

log = structlog.get_logger("sigwatch.watching")

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
        | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
_EVENT = struct.Struct("iIII")
# Changes to these make the tree's folder plan stale (a folder appeared or went away).
SAFETY_INTERVAL = 60.0  # seconds: every covered quiet file is stat()ed at least this often
SAFETY_RESCAN = 300.0  # seconds between glob expansions when every tree is covered
_REPLAN_LIMIT = 16  # plans per refresh while new folders keep appearing under new watches
_STRUCTURE = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF


@dataclass(frozen=True, slots=True)
class TreePlan:
    """The folders to watch for one glob, and whether the plan is complete."""

    pattern: str
    directories: frozenset[str]
    complete: bool = True  # False: cut short (unreadable folder): poll this tree too


def _hidden_ok(part: str, name: str) -> bool:
    return not name.startswith(".") or part.startswith(".")


def plan_directories(pattern: str, *, limit: int = 1_000_000) -> TreePlan:
    """The existing folders where a path matching ``pattern`` could appear next.

    Walks the glob's folder components: a fixed component descends if it exists, a wildcard
    component keeps the matching sub-folders (hidden ones only when the component starts
    with a dot, like ``glob``), ``**`` takes every folder below. Each level's folders are
    watched, since the next level may appear in them. A missing fixed folder stops the walk
    at its deepest existing ancestor (watched, so its creation is seen).
    """
    parts = os.path.abspath(os.path.expanduser(pattern)).split(os.sep)[1:-1]
    current = [os.sep]
    out: set[str] = set()
    complete = True
    started = False  # the folders above the first wildcard-free prefix are not watched
    for part in parts:
        if not glob.has_magic(part):
            nxt = [os.path.join(d, part) for d in current]
            existing = [d for d in nxt if os.path.isdir(d)]
            if not started:
                if not existing:
                    out.update(current)  # watch the deepest existing ancestor
                    return TreePlan(pattern, frozenset(out), complete)
                current = existing
                continue
            out.update(current)
            current = existing
            if not current:
                break
            continue
        started = True
        out.update(current)
        if part == "**":
            for top in current:
                for folder, dirs, _files in walk_tree(top):
                    dirs[:] = [d for d in dirs if not d.startswith(".")]
                    out.add(folder)
                    if len(out) > limit:
                        return TreePlan(pattern, frozenset(out), complete=False)
            # Everything below is watched: later components only filter files.
            return TreePlan(pattern, frozenset(out), complete)
        nxt = []
        for folder in current:
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        try:
                            if (entry.is_dir() and fnmatch.fnmatchcase(entry.name, part)
                                    and _hidden_ok(part, entry.name)):
                                nxt.append(entry.path)
                        except OSError:
                            continue
            except OSError:
                complete = False
        current = nxt
        if len(out) + len(current) > limit:
            return TreePlan(pattern, frozenset(out), complete=False)
    out.update(current)
    return TreePlan(pattern, frozenset(out), complete)


class _Libc:
    """inotify through libc (the standard library has no binding)."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("c") or "libc.so.6"
        libc = ctypes.CDLL(name, use_errno=True)
        self.init1 = libc.inotify_init1
        self.init1.argtypes = [ctypes.c_int]
        self.add = libc.inotify_add_watch
        self.add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.rm = libc.inotify_rm_watch
        self.rm.argtypes = [ctypes.c_int, ctypes.c_int]


@dataclass
class _Tree:
    """One glob's inotify instance and its watches."""

    pattern: str
    fd: int = -1
    by_wd: dict[int, str] = field(default_factory=dict)
    by_path: dict[str, int] = field(default_factory=dict)
    polling: bool = False  # overflowed, out of watches, or never started: poll it
    reason: str = ""
    stale: bool = True  # the folder plan needs recomputing


class InotifyHints:
    """File-change hints from inotify on the folders the globs can match.

    Same interface as ``ChangeHints`` (``start``, ``take``, ``stop``, ``mode``), plus what the
    file source needs to trust it: ``covers(folder)`` and ``generation`` (bumped whenever
    the set of covered folders changes), and ``all_covered``.
    """

    def __init__(self, wake: threading.Event, *,
                 on_overflow: Callable[[], None] | None = None,
                 on_state: Callable[[int, int, int], None] | None = None,
                 max_watches: int = 1_000_000) -> None:
        """``on_overflow()`` once per tree that overflowed; ``on_state(watched folders,
        inotify trees, polled trees)`` after every change of plan."""
        self._wake = wake
        self._on_overflow = on_overflow
        self._on_state = on_state
        self._max_watches = max_watches
        self._lock = threading.Lock()
        self._dirty: set[str] = set()
        self._rescan = False
        self._trees: list[_Tree] = []
        self._covered: frozenset[str] = frozenset()
        self._thread: threading.Thread | None = None
        self._stop_r, self._stop_w = -1, -1
        self._libc: _Libc | None = None
        self.generation = 0
        self.mode = "polling"

    # -- set-up ---------------------------------------------------------------------------

    def start(self, patterns: Iterable[str]) -> str:
        """Watch the folders of every glob; returns ``inotify`` (at least one tree watched)
        or ``polling``."""
        try:
            self._libc = _Libc()
        except (OSError, AttributeError) as exc:
            log.warning("inotify_unavailable_polling", error=str(exc))
            return self.mode
        seen: set[str] = set()
        for pattern in patterns:
            if pattern in seen:
                continue
            seen.add(pattern)
            tree = _Tree(pattern)
            fd = self._libc.init1(IN_NONBLOCK | IN_CLOEXEC)
            if fd < 0:
                err = ctypes.get_errno()
                self._fall_back(tree, f"inotify_init1: {os.strerror(err)}", announce=True)
            else:
                tree.fd = fd
            self._trees.append(tree)
        self.refresh()
        if not any(not t.polling for t in self._trees):
            return self.mode
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="sigwatch-inotify",
                                        daemon=True)
        self._thread.start()
        self.mode = "inotify"
        return self.mode

    def refresh(self) -> None:
        """Recompute the folder plan of trees whose structure changed; add/remove watches."""
        changed = False
        for tree in self._trees:
            with self._lock:
                if tree.polling or not tree.stale:
                    continue
                tree.stale = False
            # A folder created before its parent's watch existed raised no event: plan again
            # until a plan adds no watch (a job folder and its logs/ made in one instant,
            # as the kubelet makes /var/log/pods/<pod>/<container>/). The glob expansion
            # that follows a refresh then finds the files already in them.
            for _ in range(_REPLAN_LIMIT):
                before = set(tree.by_path)
                plan = plan_directories(tree.pattern, limit=self._max_watches)
                changed |= self._apply(tree, plan)
                if tree.polling or set(tree.by_path) <= before:
                    break
        if changed:
            self._publish()

    def _apply(self, tree: _Tree, plan: TreePlan) -> bool:
        assert self._libc is not None
        changed = False
        with self._lock:
            gone = [p for p in tree.by_path if p not in plan.directories]
        for path in gone:
            with self._lock:
                wd = tree.by_path.pop(path)
                tree.by_wd.pop(wd, None)
            self._libc.rm(tree.fd, wd)
            changed = True
        for path in sorted(plan.directories):
            if path in tree.by_path:
                continue
            wd = self._libc.add(tree.fd, os.fsencode(path), MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
                    continue  # gone meanwhile, or not ours to read: the files poll as usual
                self._fall_back(tree, f"inotify_add_watch: {os.strerror(err)}",
                                announce=True)
                return True
            with self._lock:
                tree.by_wd[wd] = path
                tree.by_path[path] = wd
            changed = True
        if not plan.complete and not tree.polling:
            self._fall_back(tree, "folder plan incomplete (unreadable folder or too many)",
                            announce=True)
            return True
        return changed

    def _fall_back(self, tree: _Tree, reason: str, *, announce: bool) -> None:
        """This tree is polled from now on (said once)."""
        if tree.polling:
            return
        tree.polling = True
        tree.reason = reason
        if tree.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(tree.fd)
            tree.fd = -1
        with self._lock:
            tree.by_wd.clear()
            tree.by_path.clear()
            self._rescan = True
        if announce:
            log.warning("watch_fallback_polling", glob=tree.pattern, reason=reason)
        self._publish()

    def _publish(self) -> None:
        covered: set[str] = set()
        with self._lock:
            for tree in self._trees:
                if not tree.polling:
                    covered.update(tree.by_path)
            self._covered = frozenset(covered)
            self.generation += 1
        if self._on_state is not None:
            polled = sum(1 for t in self._trees if t.polling)
            self._on_state(len(covered), len(self._trees) - polled, polled)

    # -- what the file source asks --------------------------------------------------------

    def covers(self, folder: str) -> bool:
        """True when changes in ``folder`` are reported (its tree is watched, not polled)."""
        return folder in self._covered

    @property
    def trees(self) -> list[_Tree]:
        return list(self._trees)

    @property
    def all_covered(self) -> bool:
        return bool(self._trees) and not any(t.polling for t in self._trees)

    def take(self) -> tuple[set[str], bool]:
        """The paths that changed since the last call, and whether a rescan is due."""
        with self._lock:
            dirty, rescan = self._dirty, self._rescan
            self._dirty, self._rescan = set(), False
        if rescan:
            self.refresh()
        return dirty, rescan

    # -- the reader thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            fds = [t.fd for t in self._trees if t.fd >= 0 and not t.polling]
            poller = select.poll()  # not select(): with 10,000 open files fds exceed 1023
            for fd in (self._stop_r, *fds):
                poller.register(fd, select.POLLIN)
            try:
                ready = [fd for fd, _ev in poller.poll(5000)]
            except OSError:
                ready = []
            if self._stop_r in ready:
                return
            woke = False
            for tree in self._trees:
                if tree.fd in ready and not tree.polling:
                    woke |= self._read(tree)
            if woke:
                self._wake.set()

    def _read(self, tree: _Tree) -> bool:
        try:
            data = os.read(tree.fd, 1 << 16)
        except BlockingIOError:
            return False
        except OSError as exc:
            self._fall_back(tree, f"read: {exc.strerror}", announce=True)
            return True
        return self.handle_events(tree, data)

    def handle_events(self, tree: _Tree, data: bytes) -> bool:
        """Record what a buffer of ``struct inotify_event`` says; True when worth a wake."""
        if tree.polling:
            return False  # already polled (an overflow is said once)
        pos = 0
        dirty: list[str] = []
        structure = False
        rescan = False
        overflow = False
        while pos + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
            name = data[pos + _EVENT.size:pos + _EVENT.size + length].rstrip(b"\0")
            pos += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                overflow = True
                continue
            folder = tree.by_wd.get(wd)
            if folder is None:
                # A watch this thread does not know yet (added a moment ago, its events
                # read before it was recorded) or no longer: look again rather than lose it.
                structure = rescan = True
                continue
            if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
                structure = True
                continue
            path = os.path.join(folder, os.fsdecode(name)) if name else folder
            dirty.append(path)
            if mask & _STRUCTURE:
                rescan = True  # a file appeared or went: the globs are expanded again
                if mask & IN_ISDIR:
                    structure = True  # and a folder: the watch plan is recomputed too
        if overflow:
            log.warning("inotify_overflow_polling", glob=tree.pattern,
                        detail="the event queue overflowed and events were lost; this "
                               "tree is polled from now on")
            if self._on_overflow is not None:
                self._on_overflow()
            self._fall_back(tree, "inotify queue overflow", announce=False)
            return True
        with self._lock:
            self._dirty.update(dirty)
            if structure:
                tree.stale = True
            if rescan or structure:
                self._rescan = True
        return bool(dirty) or structure or rescan

    def stop(self) -> None:
        if self._thread is not None:
            os.write(self._stop_w, b"x")
            self._thread.join(timeout=5)
            self._thread = None
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._stop_r = self._stop_w = -1
        for tree in self._trees:
            if tree.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(tree.fd)
                tree.fd = -1


class Hints(Protocol):
    """What the file source reads from a change notifier (``ChangeHints``, ``InotifyHints``)."""

    def take(self) -> tuple[set[str], bool]: ...


class _Tailer(Protocol):
    path: str


T = TypeVar("T", bound=_Tailer)


class SafetyNet(Generic[T]):
    """Which quiet files of covered trees to look at on a full poll, and cheaply.

    Files in folders inotify covers report their changes, so a full poll does not need to
    read them all: each pass takes the next slice (every file once per ``interval``) and
    ``stat``s it, and only a file whose inode, size or times changed since its last look
    is checked and read (a change whose event was lost). Files in folders that are not
    covered (a tree polled after an overflow, a folder inotify could not watch) are all
    checked every pass, as before.
    """

    def __init__(self, hints: InotifyHints, *, poll_interval: float,
                 interval: float = SAFETY_INTERVAL) -> None:
        self.hints = hints
        self.poll_interval = poll_interval
        self.interval = interval
        self._key: tuple[int, int] = (-1, -1)
        self._covered: list[T] = []
        self._uncovered: list[T] = []
        self._cursor = 0
        self._seen: dict[int, tuple[int, int, int, int]] = {}

    def due(self, tailers: dict[str, T], version: int) -> list[T]:
        """The tailers a full poll should check now (``version`` changes with the set)."""
        key = (self.hints.generation, version)
        if key != self._key:
            self._key = key
            covers = self.hints.covers
            self._covered, self._uncovered = [], []
            for tailer in tailers.values():
                # A symlink is covered only if its target's folder is watched too: writes
                # to the target raise events there, not next to the link.
                real = os.path.realpath(tailer.path)
                watched = covers(os.path.dirname(tailer.path)) and (
                    real == tailer.path or covers(os.path.dirname(real)))
                (self._covered if watched else self._uncovered).append(tailer)
            alive = {id(t) for t in self._covered}
            self._seen = {k: v for k, v in self._seen.items() if k in alive}
        out = list(self._uncovered)
        covered = self._covered
        if not covered:
            return out
        count = max(1, -(-len(covered) * int(self.poll_interval * 1000)
                         // int(self.interval * 1000)))
        start = self._cursor % len(covered)
        chunk = covered[start:start + count]
        if len(chunk) < count:
            chunk += covered[:count - len(chunk)]
        self._cursor = start + count
        seen = self._seen
        for tailer in chunk:
            try:
                st = os.stat(tailer.path)
                now = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            except OSError:
                now = (-1, -1, -1, -1)
            if seen.get(id(tailer)) != now:
                seen[id(tailer)] = now
                out.append(tailer)
        return out


def unmatched_globs(patterns: Iterable[str], paths: Iterable[str]) -> list[str]:
    """The globs no path in ``paths`` matches (what ``expand_sources`` found)."""
    found = list(paths)
    out: list[str] = []
    for pattern in patterns:
        full = os.path.abspath(os.path.expanduser(pattern))
        if "**" in full:
            hit = any(fnmatch.fnmatchcase(p, full) for p in found)
        else:
            hit = any(PurePosixPath(p).match(full) for p in found)
        if not hit:
            out.append(pattern)
    return out
