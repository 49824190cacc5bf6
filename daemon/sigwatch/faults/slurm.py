"""Slurm for real: read this node's state, drain it, resume it, count sigwatch's drains.

Only ``scontrol update`` changes anything, with a fixed argument list (no shell). Reading goes
through ``sinfo -N -o`` with an explicit format: ``%E`` is the reason without the
``[user@time]`` suffix ``scontrol show node`` adds, and ``%H`` when it was set (the circuit
breaker's rate). Both commands, their ``SLURM_CONF`` and the node name are injected so tests
drive a Slurm of their own.

A reason sigwatch sets reads ``sigwatch: <signature>: <short fix> [<fault id>]``;
``fault_of_reason`` finds the fault id back, so sigwatch resumes only what it drained and
never touches a drain set by an admin or another tool.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

__all__ = [
    "REASON_PREFIX",
    "BreakerCounts",
    "BreakerVerdict",
    "NodeState",
    "SlurmClient",
    "SlurmError",
    "breaker_verdict",
    "fault_of_reason",
    "make_reason",
]

REASON_PREFIX = "sigwatch: "
_REASON_RE = re.compile(r"^sigwatch: \S+: .*\[(?P<id>f[0-9a-f]{6,16})\]\s*$")
_FORMAT = "%N|%P|%T|%H|%E"


class SlurmError(Exception):
    """A Slurm command failed or could not run; the message says which and why."""


def make_reason(signature: str, fix: str, fault_id: str) -> str:
    """``sigwatch: <signature>: <short fix> [<fault id>]``."""
    return f"{REASON_PREFIX}{signature}: {fix} [{fault_id}]"


def fault_of_reason(reason: str) -> str | None:
    """The fault id of a reason sigwatch set, None for anyone else's reason."""
    m = _REASON_RE.match(reason.strip())
    return m.group("id") if m else None


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the controller sees it."""

    name: str
    state: str  # sinfo %T: idle, mixed, drained, draining, down*, ...
    reason: str  # "" when none
    reason_time: float | None  # when the reason was set
    partitions: tuple[str, ...] = ()

    @property
    def drained(self) -> bool:
        """DRAIN flag set (drained or draining; ``*`` and friends are response flags)."""
        base = self.state.rstrip("*~#!%$@^-+")
        return base.startswith(("drain", "drng"))

    @property
    def sigwatch_reason(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


@dataclass(frozen=True, slots=True)
class BreakerCounts:
    """What the controller says about the partition before a drain."""

    total: int  # nodes in scope
    drained_by_sigwatch: int  # nodes in scope drained with a sigwatch reason
    recent: int  # of those, reasons set within the last hour
    partitions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class BreakerVerdict:
    """Whether one more drain is allowed, and why not."""

    allowed: bool
    outcome: str  # "" | refused_share | refused_rate
    detail: str


def breaker_verdict(counts: BreakerCounts, *, local_recent: int, max_share: float,
                    max_per_hour: int) -> BreakerVerdict:
    """Allow a drain unless it takes sigwatch's drains past the share or the rate.

    The share allows at least one node (10 % of a 4-node partition would allow none):
    ``limit = max(1, floor(max_share * total))``. The rate counts the drains of the last hour
    the controller still shows (nodes resumed since do not count there) and this node's own.
    """
    limit = max(1, math.floor(max_share * counts.total + 1e-9))
    after = counts.drained_by_sigwatch + 1
    scope = ",".join(counts.partitions) or "the cluster"
    if after > limit:
        return BreakerVerdict(False, "refused_share", (
            f"{counts.drained_by_sigwatch} of {counts.total} nodes of {scope} are already "
            f"drained by sigwatch; one more passes the limit of {limit} "
            f"(max_share {max_share:g})"))
    recent = max(counts.recent, local_recent) + 1
    if recent > max_per_hour:
        return BreakerVerdict(False, "refused_rate", (
            f"{recent - 1} drains by sigwatch in the last hour on {scope}; one more passes "
            f"max_per_hour {max_per_hour}"))
    return BreakerVerdict(True, "", f"{after} of limit {limit} in {scope}")


def _parse_time(text: str) -> float | None:
    text = text.strip()
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()  # local time, as Slurm prints it
    except ValueError:
        return None


class SlurmClient:
    """``scontrol`` and ``sinfo`` for one node."""

    def __init__(self, node: str, *, scontrol: str = "scontrol", sinfo: str = "sinfo",
                 conf: str = "", partition: str = "", timeout: float = 15.0) -> None:
        if not node:
            raise ValueError("a Slurm node name is needed")
        self.node = node
        self.scontrol = scontrol
        self.sinfo = sinfo
        self.partition = partition
        self.timeout = timeout
        self.env = {**os.environ, **({"SLURM_CONF": conf} if conf else {})}

    def _run(self, argv: Sequence[str]) -> str:
        try:
            done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env,
                                  timeout=self.timeout, check=False)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]}: command not found") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]} {argv[1]}: no answer within {self.timeout:g} s"
                             ) from None
        except OSError as exc:
            raise SlurmError(f"{argv[0]}: {exc.strerror}") from None
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip().splitlines()
            raise SlurmError(f"{argv[0]} {argv[1]} exited with {done.returncode}: "
                             f"{why[-1] if why else 'no message'}")
        return done.stdout

    def _rows(self, *args: str) -> list[NodeState]:
        out = self._run([self.sinfo, "-h", "-N", *args, "-o", _FORMAT])
        rows: dict[str, NodeState] = {}
        for line in out.splitlines():
            parts = line.split("|", 4)
            if len(parts) != 5:
                continue
            name, part, state, when, reason = (p.strip() for p in parts)
            reason = "" if reason == "none" else reason
            part = part.rstrip("*")  # the default partition is marked with a star
            seen = rows.get(name)
            parts_of = (*seen.partitions, part) if seen is not None else (part,)
            rows[name] = NodeState(name, state, reason, _parse_time(when), parts_of)
        return list(rows.values())

    def node_state(self) -> NodeState:
        """This node now (raises ``SlurmError`` when the controller cannot tell)."""
        rows = self._rows("-n", self.node)
        for row in rows:
            if row.name == self.node:
                return row
        raise SlurmError(f"sinfo does not know the node {self.node!r}")

    def drain(self, reason: str) -> None:
        self._run([self.scontrol, "update", f"NodeName={self.node}", "State=DRAIN",
                   f"Reason={reason}"])

    def resume(self) -> None:
        self._run([self.scontrol, "update", f"NodeName={self.node}", "State=RESUME"])

    def breaker_counts(self, now: float, partitions: Sequence[str] = ()) -> BreakerCounts:
        """sigwatch's drains in this node's partitions (or the configured one)."""
        scope = (self.partition,) if self.partition else tuple(partitions)
        rows = self._rows(*(("-p", ",".join(scope)) if scope else ()))
        drained = [r for r in rows if r.drained and r.sigwatch_reason]
        recent = [r for r in drained if r.reason_time is not None
                  and now - r.reason_time <= 3600.0]
        return BreakerCounts(len(rows), len(drained), len(recent), scope)
