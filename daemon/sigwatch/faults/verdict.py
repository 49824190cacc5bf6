"""The daemon's verdict on its node, written for ``sigwatch health`` to read in milliseconds.

The running daemon writes ``<state_dir>/health.json`` whenever the verdict changes and at
least every ``every`` seconds: its PID, the open faults, the sources that cannot read (the
monitor is blind there) and the policy mode. ``evaluate`` is the other side, used by
``sigwatch health``: it finds the daemon that holds the state folder's instance lock (from
``/proc/locks``, without taking the lock: a health check must never stop a daemon from
starting), reads the verdict, and turns it into an exit status and one line.

Stdlib only, and nothing of the daemon is imported: a health check runs in a job's prolog and
must answer in well under a second on a loaded node.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sigwatch.statedir import default_state_dir

__all__ = [
    "EXIT_BLIND",
    "EXIT_FAULT",
    "EXIT_HEALTHY",
    "EXIT_NO_DAEMON",
    "STALE_AFTER",
    "VerdictWriter",
    "daemon_pid",
    "evaluate",
    "state_dir_of",
]

EXIT_HEALTHY = 0
EXIT_FAULT = 1  # a node fault is open (act mode)
EXIT_USAGE = 2  # bad arguments or config (as every sigwatch command)
EXIT_BLIND = 3  # a source cannot read
EXIT_NO_DAEMON = 4  # no daemon on this state folder, or it stopped reporting
STALE_AFTER = 30.0
VERSION = 1


@dataclass(frozen=True, slots=True)
class OpenFault:
    """What the verdict says of one open fault."""

    id: str
    signature: str
    state: str
    outcome: str
    since: float

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "signature": self.signature, "state": self.state,
                "outcome": self.outcome, "since": self.since}


class VerdictWriter:
    """Writes ``health.json`` atomically: on change, else every ``every`` seconds."""

    def __init__(self, path: Path, *, node: str, mode: str, every: float = 2.0) -> None:
        self.path = path
        self.node = node
        self.mode = mode
        self.every = every
        self._last: tuple[Any, ...] | None = None
        self._written = float("-inf")

    def update(self, now: float, monotonic: float, faults: Sequence[OpenFault],
               blind: Mapping[str, str], sources: Sequence[str]) -> bool:
        """Write when something changed or ``every`` passed; True when written."""
        key = (tuple(f.to_json().values() for f in faults), tuple(sorted(blind.items())),
               tuple(sources))
        if key == self._last and monotonic - self._written < self.every:
            return False
        doc = {"version": VERSION, "pid": os.getpid(), "written_at": now, "every": self.every,
               "node": self.node, "mode": self.mode, "faults": [f.to_json() for f in faults],
               "blind": dict(blind), "sources": list(sources)}
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            return False
        self._last, self._written = key, monotonic
        return True


def state_dir_of(config: Path | None) -> Path:
    """The ``state_dir`` a config file gives (its default when absent). Raises ValueError."""
    if config is None:
        return default_state_dir()
    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{config}: cannot read: {exc.strerror}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{config}: invalid TOML: {exc}") from None
    value = data.get("state_dir")
    if value is None:
        return default_state_dir()
    if not isinstance(value, str) or not value:
        raise ValueError(f"{config}: state_dir: must be a path")
    return Path(value)


def daemon_pid(state_dir: Path) -> int | None:
    """The PID of the daemon holding ``<state_dir>/lock``, None when no one holds it."""
    lock = state_dir / "lock"
    try:
        pid_text = lock.read_text(encoding="ascii", errors="replace").strip()
        inode = lock.stat().st_ino
    except OSError:
        return None
    if not pid_text.isdigit():
        return None
    pid = int(pid_text)
    held: list[list[str]] | None
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            held = [line.split() for line in fh]
    except OSError:
        held = None
    if held is not None:
        for parts in held:
            # "1: FLOCK  ADVISORY  WRITE 1234 00:2d:5678 0 EOF" (a "->" marks a waiter)
            if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
                continue
            if parts[5].rsplit(":", 1)[-1] == str(inode):
                return int(parts[4]) if parts[4].isdigit() else pid
        return None
    try:  # no /proc/locks: the PID in the file is alive
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def evaluate(state_dir: Path, now: float | None = None,
             stale_after: float = STALE_AFTER) -> tuple[int, str]:
    """(exit status, one line) for the daemon on ``state_dir``."""
    now = time.time() if now is None else now
    pid = daemon_pid(state_dir)
    if pid is None:
        return EXIT_NO_DAEMON, f"sigwatch is not running (no daemon holds {state_dir}/lock)"
    try:
        doc = json.loads((state_dir / "health.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = None
    if not isinstance(doc, dict) or doc.get("pid") != pid:
        return EXIT_NO_DAEMON, f"sigwatch (pid {pid}) has not reported a verdict yet"
    age = now - float(doc.get("written_at") or 0.0)
    if age > stale_after:
        return EXIT_NO_DAEMON, (f"sigwatch (pid {pid}) has not reported for {age:.0f} s: "
                                "hung or overloaded")
    faults = [f for f in doc.get("faults") or () if isinstance(f, dict)]
    blind = {str(k): str(v) for k, v in (doc.get("blind") or {}).items()}
    mode = str(doc.get("mode") or "observe")
    blind_text = "; ".join(f"source {name!r} cannot read: {why}"
                           for name, why in sorted(blind.items()))
    if faults:
        first = faults[0]
        what = (f"fault {first.get('id')} {first.get('state')} since "
                f"{_clock(float(first.get('since') or 0.0))}: {first.get('signature')}")
        outcome = str(first.get("outcome") or "")
        if outcome:
            what += f" ({outcome.replace('_', ' ')})"
        if len(faults) > 1:
            what += f", and {len(faults) - 1} more"
        if mode == "act":
            return EXIT_FAULT, what + (f"; blind: {blind_text}" if blind else "")
        if not blind:
            return EXIT_HEALTHY, f"ok (observe mode, nothing is done): {what}"
    if blind:
        return EXIT_BLIND, f"blind: {blind_text}"
    sources = doc.get("sources") or []
    return EXIT_HEALTHY, (f"ok: no open fault, {len(sources)} source(s) reading "
                          f"(sigwatch pid {pid}, {mode} mode)")


def main_health(config: Path | None, out: Any, err: Any) -> int:
    """``sigwatch health --config FILE``: one line on stdout, the exit status."""
    try:
        state_dir = state_dir_of(config)
    except ValueError as exc:
        print(f"sigwatch: {exc}", file=err)
        return EXIT_USAGE
    code, line = evaluate(state_dir)
    with contextlib.suppress(OSError):
        print(line, file=out)
    return code
