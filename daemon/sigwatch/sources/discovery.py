"""Which files to tail: globs expanded on a timer, with watchdog events as a wake-up hint only.

Notifications are lost on NFS and on queue overflow, so the periodic rescan and poll are the
source of truth; an event only makes the loop look sooner.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import structlog

__all__ = ["ChangeHints", "SourceSpec", "expand_sources", "expand_sources_counted",
           "pattern_root", "walk_glob", "watch_roots"]

log = structlog.get_logger("sigwatch.discovery")


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """A named set of globs (the ``source`` label) and where to start in pre-existing files."""

    name: str
    include: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    start_at: str = "end"


def expand_sources(sources: list[SourceSpec], max_files: int) -> tuple[dict[str, str], bool]:
    """Map absolute path → source name; the first source to claim a path wins.

    Returns the mapping and whether ``max_files`` cut it short.
    """
    found, over = expand_sources_counted(sources, max_files)
    return found, bool(over)


def expand_sources_counted(sources: list[SourceSpec],
                           max_files: int) -> tuple[dict[str, str], dict[str, int]]:
    """Like ``expand_sources``; the second value counts, per source, the matching files left
    out because ``max_files`` was reached (they are still walked, to be counted)."""
    found: dict[str, str] = {}
    over: dict[str, int] = {}
    for spec in sources:
        for pattern in spec.include:
            for path in sorted(walk_glob(pattern)):
                full = os.path.abspath(path)
                if full in found or any(fnmatch.fnmatch(full, ex) for ex in spec.exclude):
                    continue
                if os.path.isdir(full):
                    continue
                if len(found) >= max_files:
                    over[spec.name] = over.get(spec.name, 0) + 1
                    continue
                found[full] = spec.name
    return found, over


def pattern_root(pattern: str) -> str:
    """The folder a glob is rooted at: its longest leading part without wildcards."""
    parts = os.path.abspath(os.path.expanduser(pattern)).split(os.sep)
    fixed = 1
    while fixed < len(parts) - 1 and not glob.has_magic(parts[fixed]):
        fixed += 1
    return os.sep.join(parts[:fixed]) or os.sep


def walk_glob(pattern: str) -> list[str]:
    """The paths a glob matches (``**`` = zero or more folders), like ``glob`` with
    ``recursive=True`` (hidden names only match a pattern that starts with a dot), but walked
    without recursion: a tree thousands of levels deep cannot overflow the stack, and each
    folder is listed at most once per pattern part (by device and inode), so symlink loops
    end at once. Folders that cannot be listed are skipped."""
    full = os.path.abspath(os.path.expanduser(pattern))
    parts = full.split(os.sep)
    if not any(glob.has_magic(p) for p in parts):
        return [full] if os.path.lexists(full) else []
    root = pattern_root(full)
    segments = parts[len(root.rstrip(os.sep).split(os.sep)):] if root != os.sep else parts[1:]
    out: list[str] = []
    seen: set[tuple[int, int, int]] = set()
    stack: list[tuple[str, int]] = [(root, 0)]
    last = len(segments) - 1
    while stack:
        folder, k = stack.pop()
        try:
            st = os.stat(folder)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino, k)
        if key in seen:
            continue
        seen.add(key)
        segment = segments[k]
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError:
            continue
        if segment == "**":
            if k == last:  # a trailing ** matches everything below
                for entry in entries:
                    if not entry.name.startswith("."):
                        out.append(entry.path)
                        if _is_dir(entry):
                            stack.append((entry.path, k))
                continue
            stack.append((folder, k + 1))  # zero folders
            stack.extend((e.path, k) for e in entries
                         if not e.name.startswith(".") and _is_dir(e))
            continue
        hidden_ok = segment.startswith(".")
        magic = glob.has_magic(segment)
        for entry in entries:
            if entry.name.startswith(".") and not hidden_ok:
                continue
            if magic:
                if not fnmatch.fnmatchcase(entry.name, segment):
                    continue
            elif entry.name != segment:
                continue
            if k == last:
                out.append(entry.path)
            elif _is_dir(entry):
                stack.append((entry.path, k + 1))
    return out


def walk_tree(top: str, onerror: Callable[[OSError], None] | None = None,
              ) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` (top-down, links to folders not followed) without recursion.

    Python 3.11's ``os.walk`` recurses once per level: a tree 1,200 levels deep ends in
    ``RecursionError``. Callers may prune ``dirs`` in place, as with ``os.walk``.
    """
    stack = [top]
    while stack:
        folder = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError as exc:
            if onerror is not None:
                onerror(exc)
            continue
        yield folder, dirs, files
        stack.extend(os.path.join(folder, d) for d in reversed(dirs))


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # follows symlinks, like glob; loops end at the seen set
    except OSError:
        return False


def watch_roots(patterns: list[str]) -> list[tuple[str, bool]]:
    """(folder, recursive) to watch for each glob: its longest existing non-wildcard prefix."""
    roots: dict[str, bool] = {}
    for pattern in patterns:
        parts = os.path.abspath(os.path.expanduser(pattern)).split(os.sep)
        fixed: list[str] = []
        for part in parts[:-1]:
            if glob.has_magic(part):
                break
            fixed.append(part)
        recursive = "**" in pattern or len(fixed) < len(parts) - 1
        folder = os.sep.join(fixed) or os.sep
        while not os.path.isdir(folder) and folder != os.sep:
            folder = os.path.dirname(folder)
        roots[folder] = roots.get(folder, False) or recursive
    return sorted(roots.items())


class ChangeHints:
    """A watchdog observer that records which paths changed and wakes the pump."""

    def __init__(self, wake: threading.Event) -> None:
        self._wake = wake
        self._lock = threading.Lock()
        self._dirty: set[str] = set()
        self._rescan = False
        self._observer: object | None = None
        self.mode = "polling"

    def start(self, roots: list[tuple[str, bool]]) -> str:
        """Start watching; returns ``inotify`` or ``polling`` (when notifications failed)."""
        try:
            from watchdog.events import FileSystemEvent, FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:  # pragma: no cover - watchdog is a hard dependency
            return self.mode

        hints = self

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                hints._note(event)

        observer = Observer()
        try:
            for folder, recursive in roots:
                observer.schedule(_Handler(), folder, recursive=recursive)
            observer.start()
        except (OSError, RecursionError) as exc:
            # ENOSPC: inotify watch limit; EMFILE: instance limit; RecursionError: watchdog
            # adds recursive watches by recursion, which a very deep tree overflows.
            log.warning("inotify_unavailable_polling", error=str(exc)[:200])
            with contextlib.suppress(Exception):  # best effort on an observer that never ran
                observer.stop()
            return self.mode
        self._observer = observer
        self.mode = "inotify"
        return self.mode

    def _note(self, event: object) -> None:
        kind = getattr(event, "event_type", "")
        paths = [getattr(event, "src_path", ""), getattr(event, "dest_path", "")]
        with self._lock:
            for p in paths:
                if p:
                    self._dirty.add(os.fsdecode(p))
            if kind in ("created", "moved", "deleted") or getattr(event, "is_directory", False):
                self._rescan = True
        self._wake.set()

    def take(self) -> tuple[set[str], bool]:
        """The paths that changed since the last call, and whether a rescan is due."""
        with self._lock:
            dirty, rescan = self._dirty, self._rescan
            self._dirty, self._rescan = set(), False
        return dirty, rescan

    def stop(self) -> None:
        observer = self._observer
        if observer is not None:
            observer.stop()  # type: ignore[attr-defined]
            observer.join(timeout=5)  # type: ignore[attr-defined]
            self._observer = None
