"""The value types of node faults: a fault and its lifecycle, a policy decision, an action.

A fault is opened when the policy says a detection acts on the node (``action = "drain"``).
Its ``state`` moves only forward through a small machine, persisted by the store:

- ``firing``: open; the node is (or would be) drained;
- ``recovering``: the node booted again since; the fault clears after a clean window (no
  new detection of its signature). A detection in the window sends it back to ``firing``
  and counts a reboot that did not help;
- ``escalated``: it came back after ``escalate_after_reboots`` reboots: no reboot clears it,
  only a recovery line or a person;
- ``cleared``: ended by a recovery signal (``reboot``, ``recovery`` line, ``manual``). Never
  by a restart of the daemon, a log rotation or a lost checkpoint.

Only this module and ``store`` know the JSON shape. Stdlib only: ``sigwatch health`` imports
what it needs from the fault package without the daemon's heavier dependencies.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = [
    "ACTION_OUTCOMES",
    "CLEARED_HOW",
    "DECISIONS",
    "FAULT_STATES",
    "Decision",
    "Fault",
]

FAULT_STATES = ("firing", "recovering", "escalated", "cleared")
OPEN_STATES = ("firing", "recovering", "escalated")

DECISIONS = (
    "none",           # the policy takes no action for this signature
    "counting",       # acts only after more within the window: counted
    "opened",         # a fault opened
    "folded",         # another detection of an open fault
    "recurred",       # came back while recovering after a reboot
    "escalated",      # came back after too many reboots
    "duplicate",      # this very line was acted on before (read again)
    "stale_boot",     # the line is from before this boot
    "stale_cleared",  # the line is older than the clear of a fault of its signature
    "recovery",       # a recovery line cleared a fault
)
"""Every ``decision`` of ``sigwatch_policy_decisions_total``."""

ACTION_OUTCOMES = {
    "drain": ("drained", "observed", "refused_share", "refused_rate", "kept_other_drain",
              "already_drained", "no_scheduler", "failed"),
    "resume": ("resumed", "observed", "not_ours", "not_drained", "still_needed",
               "no_scheduler", "failed"),
}
"""Every (action, outcome) of ``sigwatch_node_actions_total``."""

CLEARED_HOW = ("reboot", "recovery", "manual")


@dataclass(frozen=True, slots=True)
class Decision:
    """What the policy made of one detection (printed by ``sigwatch policy explain``)."""

    time: float  # when the line was written (its own time), else when it was read
    signature: str
    owner: str
    severity: str
    decision: str  # one of DECISIONS
    action: str  # none | drain
    fault_id: str = ""
    detail: str = ""
    where: str = ""  # path:line
    rule: str = ""  # where the rule came from


@dataclass(frozen=True, slots=True)
class Fault:
    """One node fault, as persisted in ``faults.json`` and listed by ``sigwatch faults``."""

    id: str
    signature: str
    title: str
    owner: str
    severity: str
    state: str
    opened_at: float  # wall time the fault opened
    first_seen: float  # the triggering line's time
    last_seen: float
    boot_id: str  # the boot it opened in
    source: str = ""
    where: str = ""  # path:line of the first line
    text: str = ""  # the first line
    event_id: str = ""
    count: int = 1  # detections folded in
    action: str = "drain"  # what the policy asked (none | drain)
    outcome: str = ""  # the last action outcome (ACTION_OUTCOMES), "" before any
    outcome_detail: str = ""
    pending: str = ""  # an action still to do after a crash or refusal: drain | resume | ""
    slurm_reason: str = ""  # the Reason sigwatch set (or would set)
    fix: str = ""  # the short fix quoted in the reason
    boots: tuple[str, ...] = ()  # boot ids seen while open (the first is boot_id)
    failed_reboots: int = 0  # times it came back after a reboot
    recovering_since: float | None = None
    cleared_at: float | None = None
    cleared_by: str = ""  # reboot | recovery:<signature> | manual:<who>
    note: str = ""  # what the person who cleared it wrote
    history: tuple[tuple[float, str], ...] = field(default_factory=tuple)  # (time, event)

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["boots"] = list(self.boots)
        doc["history"] = [list(h) for h in self.history]
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Fault:
        """Rebuild a fault; unknown keys are ignored (a newer daemon's), missing ones default."""
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in doc.items() if k in known}
        for name in ("id", "signature", "title", "owner", "severity", "state"):
            if not isinstance(data.get(name), str):
                raise TypeError(f"fault field {name} missing or not text")
        if data["state"] not in FAULT_STATES:
            raise ValueError(f"unknown fault state {data['state']!r}")
        for name in ("opened_at", "first_seen", "last_seen"):
            data[name] = float(data[name])
        data["boots"] = tuple(str(b) for b in data.get("boots") or ())
        data["history"] = tuple((float(t), str(e)) for t, e in data.get("history") or ())
        for name in ("recovering_since", "cleared_at"):
            if data.get(name) is not None:
                data[name] = float(data[name])
        return cls(**data)
