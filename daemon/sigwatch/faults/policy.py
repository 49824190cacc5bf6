"""Policy as data: what the node does about each signature, resolved once per pattern set.

``Policy.rule`` merges, for one signature: the built-in default (a node-owned critical
signature drains), the configuration's ``[policy.defaults]`` for its owner and severity, the
``[policy]`` table of the signature's own file, then ``[policy.signatures.<id>]`` of the
configuration. A user-owned signature never drains, whatever the layers say; ``Policy.check``
reports a configuration that asks for it, or names a signature that does not exist.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from sigwatch.faults.settings import PolicySettings

__all__ = ["DETECTOR_SIGNATURES", "Policy", "Rule", "short_fix"]

DETECTOR_SIGNATURES = frozenset({
    "burst", "novel_error", "step_time_regression", "training_stalled",
    "training_loss_scale_minimum", "training_nonfinite", "command_exited_abnormally",
    "training_loss_scale_collapse", "training_loss_diverged",
    "generic_traceback", "generic_native_crash", "generic_error_record", "generic_failed_check",
    "generic_blocked_stack",
})
"""Detections of the detectors beyond signature files: a rule may name them too."""

_REASON_CHARS = 96


@dataclass(frozen=True, slots=True)
class Rule:
    """The effective policy of one signature."""

    action: str  # none | drain
    count: int = 1
    window: float = 0.0  # seconds; the count is within this window
    escalate_after_reboots: int = 2
    recovered_by: tuple[str, ...] = ()
    reason: str = ""  # the short fix quoted in the Slurm reason
    origin: str = ""  # which layer decided the action
    note: str = ""

    def describe(self) -> str:
        """``drain (node/critical default)``, ``drain after 3 within 24h (config)``, ..."""
        if self.action == "none":
            return f"none ({self.note or self.origin})"
        text = self.action
        if self.count > 1:
            text += f" after {self.count} within {_duration(self.window)}"
        return f"{text} ({self.origin})"


class SignatureLike(Protocol):
    """The part of ``CompiledSignature`` the policy reads."""

    @property
    def id(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def policy(self) -> tuple[tuple[str, Any], ...]: ...
    @property
    def remediation(self) -> Any: ...


def short_fix(summary: str, limit: int = _REASON_CHARS) -> str:
    """The first sentence of a remediation summary, printable ASCII, at most ``limit`` chars."""
    text = " ".join(summary.split())
    for stop in (". ", "; "):
        cut = text.find(stop)
        if 0 < cut < limit:
            text = text[:cut]
            break
    text = "".join(c if " " <= c <= "~" else "?" for c in text).replace("[", "(").replace(
        "]", ")").rstrip(".")
    if len(text) > limit:
        text = text[: limit - 3].rsplit(" ", 1)[0] + "..."
    return text or "see the signature's remediation"


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}min"
    return f"{seconds:g}s"


class Policy:
    """Resolves rules from the settings and the signature set of the moment."""

    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings
        self.mode = settings.mode
        self.clean_window = settings.clean_window_seconds
        # Keyed by the signature object's id; the object is kept with its rule so that id is
        # never reused by another object (a reloaded file) while the entry lives.
        self._cache: dict[tuple[int, str, str, str], tuple[object, Rule]] = {}

    def rule(self, signature: str, owner: str, severity: str,
             sig: SignatureLike | None = None) -> Rule:
        key = (id(sig), signature, owner, severity)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) > 4096:
                self._cache.clear()
            found = self._cache[key] = (sig, self._resolve(signature, owner, severity, sig))
        return found[1]

    def _resolve(self, signature: str, owner: str, severity: str,
                 sig: SignatureLike | None) -> Rule:
        s = self.settings
        action = s.defaults.action(owner, severity)
        origin = f"{owner}/{severity} default"
        values: dict[str, Any] = {"count": 1, "window": 0.0,
                                  "escalate_after_reboots": s.escalate_after_reboots,
                                  "recovered_by": (), "reason": ""}
        layers: list[tuple[str, dict[str, Any]]] = []
        if sig is not None and sig.policy:
            layers.append(("signature file", dict(sig.policy)))
        configured = s.signatures.get(signature)
        if configured is not None:
            layers.append(("config", configured.model_dump(exclude_unset=True)))
        for name, layer in layers:
            if "action" in layer:
                action, origin = str(layer["action"]), name
            if "count" in layer:
                values["count"] = int(layer["count"])
            if "window_seconds" in layer:
                values["window"] = float(layer["window_seconds"])
            if "escalate_after_reboots" in layer:
                values["escalate_after_reboots"] = int(layer["escalate_after_reboots"])
            if layer.get("recovered_by") is not None:
                values["recovered_by"] = tuple(str(x) for x in layer["recovered_by"])
            if layer.get("reason"):
                values["reason"] = str(layer["reason"])
        note = ""
        if owner == "user":
            action, note = "none", "user-owned: a job's own failure never drains a node"
        elif action == "none":
            note = origin
        if not values["reason"]:
            summary = getattr(getattr(sig, "remediation", None), "summary", "") if sig else ""
            values["reason"] = short_fix(summary or signature.replace("_", " "))
        return Rule(action=action, origin=origin, note=note, **values)

    def recovery_targets(self, signatures: Iterable[SignatureLike]) -> dict[str, set[str]]:
        """Recovery signature -> signatures whose faults it clears."""
        out: dict[str, set[str]] = {}
        for sig in signatures:
            rule = self.rule(sig.id, sig.owner, _severity_of(sig), sig)
            for rec in rule.recovered_by:
                out.setdefault(rec, set()).add(sig.id)
        for sig_id, configured in self.settings.signatures.items():
            for rec in configured.recovered_by or ():
                out.setdefault(rec, set()).add(sig_id)
        return out

    def check(self, signatures: Iterable[SignatureLike]) -> list[tuple[str, str]]:
        """Problems of the configuration against the loaded signatures: (field, reason)."""
        by_id = {s.id: s for s in signatures}
        known = set(by_id) | DETECTOR_SIGNATURES
        problems: list[tuple[str, str]] = []
        for sig_id, configured in self.settings.signatures.items():
            where = f"policy.signatures.{sig_id}"
            if sig_id not in known:
                problems.append((where, "no signature has this id"))
                continue
            sig = by_id.get(sig_id)
            rule = self.rule(sig_id, sig.owner if sig is not None else "unknown",
                             _severity_of(sig) if sig is not None else "info", sig)
            if rule.count > 1 and rule.window <= 0:
                problems.append((f"{where}.count", ("a count above 1 needs window_seconds "
                                 "(here or in the signature file): the count is within it")))
            if sig is not None and sig.owner == "user" and configured.action == "drain":
                problems.append((f"{where}.action",
                                 "a user-owned signature never drains a node"))
            for rec in configured.recovered_by or ():
                if rec not in known:
                    problems.append((f"{where}.recovered_by",
                                     f"no signature has the id {rec!r}"))
        return problems


def _severity_of(sig: SignatureLike) -> str:
    severity = getattr(sig, "severity", None)
    return str(getattr(severity, "label", severity or "info"))
