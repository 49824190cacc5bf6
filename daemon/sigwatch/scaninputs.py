"""What ``sigwatch scan`` reads: files, compressed rotations, directories and stdin.

A rotated log is usually compressed (``app.log.2.gz``); reading its bytes as text would find
nothing and report a false "clean". Compression is recognised by its magic bytes (not the
name): gzip, bzip2 and xz are read through the standard library; zstd, lz4 and zip are named
in a clear error. A directory is read recursively in name order (symbolic links to folders
are not followed, so a loop cannot trap the scan); what cannot be read is reported and the
scan goes on, and the exit status says that the result is incomplete.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, cast

from sigwatch.sources.discovery import walk_tree

__all__ = ["COMPRESSION_ERRORS", "Decompressed", "ScanInput", "open_input", "scan_inputs"]

_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"\x04\x22\x4d\x18", "lz4"),
    (b"PK\x03\x04", "zip"),
)
_UNSUPPORTED = {"zstd": "zstd -dc", "lz4": "lz4 -dc", "zip": "unzip -p"}
COMPRESSION_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, lzma.LZMAError)


@dataclass(frozen=True, slots=True)
class ScanInput:
    """One thing to read (``path``), or why it cannot be read (``error``)."""

    path: str
    error: str = ""
    note: str = ""  # e.g. "skipped: a named pipe inside a folder"


def compression_of(head: bytes) -> str | None:
    """The compression format of a file starting with ``head`` (None: plain)."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def open_input(path: str) -> BinaryIO:
    """Open ``path`` for reading, decompressing gzip/bzip2/xz; ``-`` is stdin.

    Raises ``OSError`` with a readable message for formats it cannot decompress.
    """
    if path == "-":
        return sys.stdin.buffer
    fh = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    try:
        head = fh.peek(8)[:8] if hasattr(fh, "peek") else b""
        kind = compression_of(head)
        if kind is None:
            return fh
        if kind in _UNSUPPORTED:
            msg = (f"compressed with {kind}, which scan cannot read: "
                   f"{_UNSUPPORTED[kind]} {path} | sigwatch scan -")
            raise OSError(msg)
        inner: gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile
        if kind == "gzip":
            inner = gzip.GzipFile(fileobj=fh)
        elif kind == "bzip2":
            inner = bz2.BZ2File(fh)
        else:
            inner = lzma.LZMAFile(fh)  # noqa: SIM115 - closed by Decompressed.close
        return cast("BinaryIO", Decompressed(inner, fh))
    except BaseException:
        fh.close()
        raise


class Decompressed:
    """A decompressing reader that hands out what it decoded before a corrupt or cut end.

    ``read`` returns ``b""`` at the first error (so the lines before it are still matched)
    and keeps the error in ``error`` for the caller to report: a truncated ``.gz`` (a copy
    interrupted by a full disk) is scanned up to the damage, and still reported.
    """

    def __init__(self, inner: gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile,
                 raw: BinaryIO) -> None:
        self._inner = inner
        self._raw = raw
        self.error: BaseException | None = None

    def read(self, size: int = -1) -> bytes:
        if self.error is not None:
            return b""
        try:
            return self._inner.read1(size if size > 0 else 1 << 20)
        except COMPRESSION_ERRORS as exc:
            self.error = exc
            return b""

    def close(self) -> None:
        self._inner.close()
        self._raw.close()


def scan_inputs(names: list[str]) -> Iterator[ScanInput]:
    """Expand the command line: files as given, directories recursively, ``-`` as stdin."""
    for name in names:
        if name == "-":
            yield ScanInput("-")
            continue
        try:
            st = os.stat(name)
        except OSError as exc:
            yield ScanInput(name, error=exc.strerror or str(exc))
            continue
        if stat.S_ISDIR(st.st_mode):
            yield from _walk(name)
        else:
            yield ScanInput(name)


def _walk(top: str) -> Iterator[ScanInput]:
    errors: list[OSError] = []
    for folder, dirs, files in walk_tree(top, onerror=errors.append):
        while errors:
            failed = errors.pop()
            yield ScanInput(str(failed.filename or folder),
                            error=failed.strerror or str(failed))
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError as exc:
                yield ScanInput(path, error=exc.strerror or str(exc))
                continue
            if stat.S_ISREG(st.st_mode):
                yield ScanInput(path)
            else:
                yield ScanInput(path, note="skipped: not a regular file")
    while errors:
        late = errors.pop()
        yield ScanInput(str(late.filename or top), error=late.strerror or str(late))
