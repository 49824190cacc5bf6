"""Copies of content already read: logrotate's ``copytruncate`` seen through a glob that also
matches the copies (``*.log*``).

``copytruncate`` copies ``app.log`` to a new file next to it (``app.log.1``,
``app.log-20250101``) and truncates ``app.log`` in place: the original keeps its inode and its
path, the copy is a new inode whose content is the original's history. Read as a new file, the
copy would report every detection in it a second time. A copy is recognised by content: its
name extends the original's name in the same folder, it starts with the same head (first line)
and it holds, where we stopped reading the original, the bytes we read there (the last KiB, or
a hash of it from the checkpoint). A file at the original's own path is never a copy (a log
deleted and written again with the same text is new content), nor is one whose original has
left its path (rotation by rename: the inode tells).

``ReadContent`` is what we read of one original; ``ReadHistory`` keeps it for originals whose
content is gone (truncated, or changed while the daemon was down), so a copy found later still
resumes where reading stopped.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from sigwatch.sources.file import FileRecord, FileStream, Resume

__all__ = ["MAX_REMEMBERED", "ReadContent", "ReadHistory", "copy_holds", "hash_of_head",
           "originals_of"]

MAX_REMEMBERED = 1024
MIN_OVERLAP = 32  # bytes a shorter copy must share with what we read (or all it has)


@dataclass(frozen=True, slots=True)
class ReadContent:
    """What was read of one original: its head, how far, and the bytes (or their hash) just
    before that point; ``resume`` is where a copy of it goes on reading."""

    path: str
    dev: int
    ino: int
    head_len: int
    head_hash: str
    offset: int
    tail: bytes  # raw bytes ending at ``offset`` (1 KiB from a stream, 32 from a record)
    window_len: int  # a record's hashed window ending at ``offset`` (0: none)
    window_hash: str
    resume: Resume

    @classmethod
    def of_stream(cls, stream: FileStream, lineno: int) -> ReadContent | None:
        """The content a stream has read so far (None before its head is known)."""
        if stream.fingerprint is None or not stream.offset:
            return None
        head_len, head_hash = stream.fingerprint
        return cls(stream.path, stream.dev, stream.ino, head_len, head_hash, stream.offset,
                   stream.marker, 0, "",
                   Resume(stream.offset, lineno, stream.offset, stream.marker))

    @classmethod
    def of_record(cls, record: FileRecord) -> ReadContent | None:
        """The content a checkpoint record describes (its file changed while we were down)."""
        if not record.head_len or record.emitted <= 0:
            return None
        marker = bytes.fromhex(record.marker)
        return cls(record.path, record.dev, record.ino, record.head_len, record.head_hash,
                   record.emitted, marker, record.window_len, record.window_hash,
                   Resume(record.offset, record.lineno, record.emitted, marker,
                          tuple(record.pending)))


def originals_of(path: str) -> Iterator[str]:
    """The paths whose copy ``path`` could be: same folder, a shorter start of its name."""
    folder, name = os.path.split(path)
    for cut in range(len(name) - 1, 0, -1):
        yield os.path.join(folder, name[:cut])


def hash_of_head(fd: int, length: int) -> str:
    """The hash a checkpoint record or stream keeps of a file's first ``length`` bytes."""
    return hashlib.sha256(os.pread(fd, length, 0)).hexdigest()[:16]


def copy_holds(fd: int, size: int, content: ReadContent) -> str:
    """Whether the file ``fd`` (``size`` bytes) is a copy of ``content``: ``"all"`` (it holds
    everything read, maybe more), ``"part"`` (it ends before where reading stopped: all of it
    was read), ``""`` (not a copy, or it cannot be told). The head is checked by the caller."""
    end = content.offset
    tail = content.tail
    try:
        if size >= end:
            if content.window_len:
                window = os.pread(fd, content.window_len, end - content.window_len)
                return "all" if hashlib.sha256(window).hexdigest()[:32] == \
                    content.window_hash else ""
            return "all" if tail and os.pread(fd, len(tail), end - len(tail)) == tail else ""
        start = end - len(tail)
        low = max(start, 0)
        if not tail or size - low < min(size, MIN_OVERLAP):
            return ""
        return "part" if os.pread(fd, size - low, low) == tail[low - start:size - start] else ""
    except OSError:
        return ""


class ReadHistory:
    """Content read from originals that no longer hold it, by the original's path (the
    latest per path, the newest ``MAX_REMEMBERED`` paths)."""

    def __init__(self) -> None:
        self._by_path: OrderedDict[str, ReadContent] = OrderedDict()

    def remember(self, content: ReadContent | None) -> None:
        if content is None:
            return
        self._by_path.pop(content.path, None)
        self._by_path[content.path] = content
        while len(self._by_path) > MAX_REMEMBERED:
            self._by_path.popitem(last=False)

    def get(self, path: str) -> ReadContent | None:
        return self._by_path.get(path)

    def __len__(self) -> int:
        return len(self._by_path)
