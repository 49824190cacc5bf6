"""Which boot this is: the kernel's boot id, and when the boot started.

A changed boot id is one of the recovery signals of a fault. The boot's start time tells an
old line (written before this boot, read again after a lost checkpoint) from a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sigwatch.faults.settings import BOOT_ID_PATH

__all__ = ["BootInfo", "BootWatch", "read_boot_id", "read_boot_time"]


def read_boot_id(path: str) -> str:
    """The boot id in ``path`` (empty when unreadable)."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read(128).strip()
    except OSError:
        return ""


def read_boot_time(proc_stat: str = "/proc/stat") -> float | None:
    """When the running kernel booted (``btime`` of ``/proc/stat``), or None."""
    try:
        with open(proc_stat, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


@dataclass(frozen=True, slots=True)
class BootInfo:
    """A boot: its id, and its start (None when only the id is known)."""

    id: str
    started: float | None


class BootWatch:
    """Reads the boot id from ``path``; the start time only from the kernel's own file.

    With another ``path`` (tests simulate a reboot by writing a new id there) the start is not
    known here, and the fault engine uses the time it first saw the id instead.
    """

    def __init__(self, path: str = BOOT_ID_PATH, proc_stat: str = "/proc/stat") -> None:
        self.path = path
        self.proc_stat = proc_stat

    def current(self) -> BootInfo:
        started = read_boot_time(self.proc_stat) if self.path == BOOT_ID_PATH else None
        return BootInfo(read_boot_id(self.path), started)
