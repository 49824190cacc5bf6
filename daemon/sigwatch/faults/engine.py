"""``FaultEngine``: detections in, node faults with a lifecycle out, Slurm acted on safely.

It is a ``Sink`` (the daemon runs it behind a ``QueuedSink``, so ``scontrol`` never delays
reading) and the one owner of the fault book. For each detection the policy's rule says
whether the node is acted on; if so the engine decides, in this order:

1. a recovery line (a signature another one names in ``recovered_by``) clears that fault;
2. the very same line acted on before (same event id, read again after a lost checkpoint or a
   crash) is a ``duplicate``;
3. a line written before this boot is ``stale_boot``; one written before a fault of its
   signature was cleared is ``stale_cleared`` (an old Xid read again never re-opens it);
4. a line of an open fault folds into it; while ``recovering`` it sends the fault back to
   ``firing`` (a reboot that did not help), and to ``escalated`` after enough of those;
5. otherwise it counts toward the rule's ``count`` within its window, and opens a fault.

The book is saved before any action is taken, and an action still to do is saved as
``pending`` and done again after a crash, once: the controller's own state decides (a node
already drained with this fault's reason is not drained again; a node drained by anyone else
is left alone; a node is resumed only while it is still drained with a sigwatch reason and no
other open fault wants it drained). Before each drain the circuit breaker asks the controller
how many nodes sigwatch has drained. Every action taken, observed or refused is logged,
counted (``sigwatch_node_actions_total``) and, when it changes the node or refuses to, paged.

Recovery signals, checked on ``tick``: a new boot id starts a clean window, after which the
fault clears; a recovery line; an explicit clear (``clear``, from the HTTP API or a request
file the command line drops in ``requests_dir``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from sigwatch.clock import Clock
from sigwatch.faults.boot import BootWatch
from sigwatch.faults.model import OPEN_STATES, Decision, Fault
from sigwatch.faults.policy import Policy, Rule
from sigwatch.faults.slurm import (
    SlurmClient,
    SlurmError,
    breaker_verdict,
    fault_of_reason,
    make_reason,
)
from sigwatch.model import Detection, Remediation, Severity
from sigwatch.patterns.compiled import PatternSet
from sigwatch.telemetry.metrics import SelfMetrics

__all__ = ["ClearResult", "FaultEngine", "SlurmLimits"]

log = structlog.get_logger("sigwatch.faults")

FUTURE_SLACK = 300.0  # a line stamped further ahead than this has a wrong year: use read time
REBOOT_MEMORY = 7 * 86400.0  # a fault cleared by a reboot and back within this: reboot failed


@dataclasses.dataclass(frozen=True, slots=True)
class SlurmLimits:
    """The circuit breaker and the retry pace."""

    max_share: float = 0.10
    max_per_hour: int = 3
    retry_seconds: float = 60.0


@dataclasses.dataclass(frozen=True, slots=True)
class ClearResult:
    """What an explicit clear came to."""

    ok: bool
    message: str
    fault: Fault | None = None


class FaultEngine:
    """Decides on detections, keeps the fault book, drains and resumes through Slurm."""

    name = "faults"

    def __init__(
        self,
        policy: Policy,
        *,
        clock: Clock,
        store: Any = None,  # FaultStore | None (None: in memory, for explain and tests)
        boot: BootWatch | None = None,
        slurm: SlurmClient | None = None,
        limits: SlurmLimits | None = None,
        node: str = "",
        signatures: Callable[[], PatternSet] | None = None,
        metrics: SelfMetrics | None = None,
        notify: Callable[[Detection], None] | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        requests_dir: Path | None = None,
        history_days: float = 30.0,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.store = store
        self.boot = boot
        self.slurm = slurm
        self.limits = limits or SlurmLimits()
        self.node = node
        self.signatures = signatures
        self.m = metrics
        self.notify = notify
        self.on_decision = on_decision
        self.requests_dir = requests_dir
        self.keep_seconds = history_days * 86400.0
        self._lock = threading.RLock()
        self._dirty = False
        self._retry_at: dict[str, float] = {}
        self._recovery: tuple[int, dict[str, set[str]]] = (0, {})
        self._started = False
        self._view: tuple[Fault, ...] = ()
        self.version = 0  # grows when the open faults change (the verdict is rewritten)
        self.on_change = on_change  # called then (the daemon wakes its pump)
        self.book = self._load()
        self._check_boot(self.clock.time())
        self._publish()
        self._save()

    # -- the Sink protocol (on the QueuedSink's worker) --------------------------------------

    def emit(self, detection: Detection) -> None:
        """Decide on one detection. A fault opened or changed is on disk before anything is
        done about it; lines only remembered or folded are saved at the next ``flush``."""
        with self._lock:
            self.decide(detection)
            self._publish()

    def flush(self) -> None:
        with self._lock:
            self._save()

    def tick(self, now: float) -> None:
        """Boot changes, clean windows, pending actions, clear requests; then save."""
        with self._lock:
            if not self._started:
                self._started = True
                self._reconcile(now)
            self._check_boot(now)
            self._windows(now)
            self._retry(now)
            self._requests()
            self.book.prune(now, self.keep_seconds)
            self._publish()
            self._save()

    def close(self) -> None:
        self.flush()

    # -- reading (any thread, no lock: an immutable snapshot) --------------------------------

    def faults(self) -> tuple[Fault, ...]:
        """Every fault the book holds, newest first."""
        return self._view

    def open_faults(self) -> tuple[Fault, ...]:
        return tuple(f for f in self._view if f.open)

    @property
    def mode(self) -> str:
        return self.policy.mode

    # -- decisions -----------------------------------------------------------------------------

    def decide(self, d: Detection, now: float | None = None) -> Decision:
        """Apply the policy to one detection (the caller holds the lock or owns the engine)."""
        now = self.clock.time() if now is None else now
        t = d.line_time if d.line_time is not None and d.line_time <= now + FUTURE_SLACK \
            else d.time
        sig = self.signatures().get(d.signature) if self.signatures is not None else None
        rule = self.policy.rule(d.signature, d.owner, d.severity.label, sig)
        where = d.path if d.line is None else f"{d.path}:{d.line}"

        def made(decision: str, detail: str, fault_id: str = "") -> Decision:
            out = Decision(t, d.signature, d.owner, d.severity.label, decision, rule.action,
                           fault_id, detail, where, rule.describe())
            self._decided(out)
            return out

        recovered = self._recovery_of(d, t, now)
        if recovered:
            return made("recovery", f"recovery line: cleared {', '.join(recovered)}",
                        recovered[0])
        if rule.action == "none":
            return made("none", rule.describe())
        book = self.book
        if d.event_id in book.seen:
            return made("duplicate", "this line was acted on before (read again)")
        if self.boot is not None and book.boot_start and t < book.boot_start - 1.0:
            book.seen[d.event_id] = t
            return made("stale_boot", "the line was written before this boot")
        cleared = [f for f in book.faults.values()
                   if f.signature == d.signature and not f.open and f.cleared_at is not None]
        last_clear = max((f.cleared_at or 0.0 for f in cleared), default=None)
        if last_clear is not None and t <= last_clear:
            book.seen[d.event_id] = t
            return made("stale_cleared",
                        "the line is older than the clear of an earlier fault of its kind")
        book.seen[d.event_id] = t
        self._dirty = True
        current = next((f for f in book.faults.values()
                        if f.signature == d.signature and f.open), None)
        if current is not None:
            return self._fold(current, d, t, rule, made)
        times = [x for x in book.occurrences.get(d.signature, []) if t - x <= rule.window]
        times.extend([t] * min(d.repeats, rule.count))  # a folded count stands for repeats
        if len(times) < rule.count:
            book.occurrences[d.signature] = times
            return made("counting", f"{len(times)} of {rule.count} within "
                        f"{rule.describe().split(' within ', 1)[-1].split(' (')[0]}")
        book.occurrences.pop(d.signature, None)
        fault = self._open(d, t, now, rule, cleared)
        decision = made("opened" if fault.state != "escalated" else "escalated",
                        f"fault {fault.id} opened: {rule.describe()}", fault.id)
        self._save()  # the fault is on disk before anything is done about it
        if fault.state == "escalated":
            self._notice("fault_escalated", fault, Severity.CRITICAL,
                         f"{fault.signature} came back after {fault.failed_reboots} "
                         "reboot(s): no reboot clears it now; inspect the hardware.")
        if rule.action == "drain":
            self._drain(fault.id, now)
        return decision

    def _decided(self, decision: Decision) -> None:
        if self.m is not None:
            self.m.policy_decisions.labels(decision.decision).inc()
        level = "info" if decision.decision not in ("none", "duplicate", "counting") \
            else "debug"
        getattr(log, level)("policy_decision", signature=decision.signature,
                            decision=decision.decision, action=decision.action,
                            fault=decision.fault_id or None, detail=decision.detail,
                            where=decision.where)
        if self.on_decision is not None:
            self.on_decision(decision)

    def _fold(self, f: Fault, d: Detection, t: float, rule: Rule,
              made: Callable[[str, str, str], Decision]) -> Decision:
        count = f.count + d.repeats  # a count update from incident folding stands for many
        changes: dict[str, Any] = {"count": count, "last_seen": max(f.last_seen, t)}
        if f.state != "recovering":
            self._replace(f, **changes)
            return made("folded", f"another detection of fault {f.id} ({count})", f.id)
        failed = f.failed_reboots + 1
        limit = rule.escalate_after_reboots
        state = "escalated" if limit and failed >= limit else "firing"
        f = self._replace(f, **changes, state=state, failed_reboots=failed,
                          recovering_since=None, event=f"came back after reboot ({failed})")
        if state == "escalated":
            self._notice("fault_escalated", f, Severity.CRITICAL,
                         f"{f.signature} came back after {failed} reboot(s): no reboot clears "
                         "it now; inspect the hardware.")
            return made("escalated", f"fault {f.id} came back after {failed} reboot(s): "
                        "escalated", f.id)
        return made("recurred", f"fault {f.id} came back after a reboot ({failed} of "
                    f"{limit or 'no limit'})", f.id)

    def _open(self, d: Detection, t: float, now: float, rule: Rule,
              cleared: list[Fault]) -> Fault:
        book = self.book
        failed = 0
        previous = max((f for f in cleared if f.cleared_by == "reboot"),
                       key=lambda f: f.cleared_at or 0.0, default=None)
        if previous is not None and t - (previous.cleared_at or 0.0) <= REBOOT_MEMORY:
            failed = previous.failed_reboots + 1  # the reboot that cleared it did not help
        limit = rule.escalate_after_reboots
        state = "escalated" if limit and failed >= limit else "firing"
        fid = self._new_id(d, now)
        fault = Fault(
            id=fid, signature=d.signature, title=d.title, owner=d.owner,
            severity=d.severity.label, state=state, opened_at=now, first_seen=t, last_seen=t,
            boot_id=book.boot_id, source=d.source,
            where=d.path if d.line is None else f"{d.path}:{d.line}",
            text=(d.text if d.text is not None else d.about)[:500], event_id=d.event_id,
            action=rule.action, fix=rule.reason,
            slurm_reason=make_reason(d.signature, rule.reason, fid),
            boots=(book.boot_id,) if book.boot_id else (), failed_reboots=failed,
            history=((now, "opened"),))
        book.faults[fid] = fault
        self._dirty = True
        if self.m is not None:
            self.m.faults_opened.labels(d.owner if d.owner in ("node", "fabric") else "unknown"
                                        ).inc()
        log.warning("fault_opened", fault=fid, signature=d.signature, state=state,
                    action=rule.action, mode=self.policy.mode, rule=rule.describe())
        return fault

    def _new_id(self, d: Detection, now: float) -> str:
        salt = 0
        while True:
            raw = f"{self.book.boot_id}|{d.signature}|{d.event_id}|{now}|{salt}".encode()
            fid = "f" + hashlib.sha256(raw).hexdigest()[:7]
            if fid not in self.book.faults:
                return fid
            salt += 1

    def _recovery_of(self, d: Detection, t: float, now: float) -> list[str]:
        """Clear the open faults a recovery line of ``d``'s signature names; their ids."""
        if self.signatures is None:
            targets_by = self.policy.recovery_targets(())
        else:
            patterns = self.signatures()
            if self._recovery[0] != id(patterns):
                self._recovery = (id(patterns),
                                  self.policy.recovery_targets(patterns.signatures))
            targets_by = self._recovery[1]
        targets = targets_by.get(d.signature)
        if not targets:
            return []
        out = []
        for f in list(self.book.faults.values()):
            if f.open and f.signature in targets and t > f.last_seen:
                if d.event_id in self.book.seen:
                    continue
                self._clear(f, now, "recovery", by=d.signature)
                out.append(f.id)
        if out:
            self.book.seen[d.event_id] = t
        return out

    # -- the lifecycle -------------------------------------------------------------------------

    def _check_boot(self, now: float) -> None:
        if self.boot is None:
            return
        info = self.boot.current()
        book = self.book
        if not info.id or info.id == book.boot_id:
            return
        first = not book.boot_id
        book.boot_id = info.id
        book.boot_start = info.started if info.started is not None else now
        book.boots.append((info.id, now))
        self._dirty = True
        if first:
            log.info("boot_recorded", boot_id=info.id)
            return
        log.info("boot_changed", boot_id=info.id, open_faults=len(self.open_faults()))
        for f in list(book.faults.values()):
            if not f.open:
                continue
            boots = (*f.boots, info.id)
            if f.state == "escalated":
                self._replace(f, boots=boots, event="reboot (escalated: stays open)")
                continue
            self._replace(f, boots=boots, state="recovering", recovering_since=now,
                          event="reboot: clean window started")
            log.info("fault_recovering", fault=f.id, signature=f.signature,
                     clears_at=now + self.policy.clean_window)

    def _windows(self, now: float) -> None:
        window = self.policy.clean_window
        for f in list(self.book.faults.values()):
            if f.state == "recovering" and f.recovering_since is not None \
                    and now >= f.recovering_since + window:
                self._clear(f, now, "reboot")

    def clear(self, fault_id: str, *, by: str, note: str = "") -> ClearResult:
        """Clear a fault by hand (the HTTP API, ``sigwatch faults clear``)."""
        with self._lock:
            f = self.book.faults.get(fault_id)
            if f is None:
                return ClearResult(False, f"no fault {fault_id!r} on this node")
            if not f.open:
                return ClearResult(False, f"fault {fault_id} is already cleared "
                                   f"({f.cleared_by})", f)
            f = self._clear(f, self.clock.time(), "manual", by=by or "unknown", note=note)
            self._publish()
            self._save()
            return ClearResult(True, f"fault {fault_id} cleared: {_outcome_text(f)}", f)

    def _clear(self, f: Fault, now: float, how: str, *, by: str = "", note: str = "") -> Fault:
        f = self._replace(f, state="cleared", cleared_at=now, recovering_since=None,
                          cleared_by=f"{how}:{by}" if by else how, note=note[:500],
                          pending="", event=f"cleared ({how}{': ' + by if by else ''})")
        self._retry_at.pop(f.id, None)
        if self.m is not None:
            self.m.faults_cleared.labels(how).inc()
        log.info("fault_cleared", fault=f.id, signature=f.signature, how=how, by=by or None)
        if f.action == "drain" and f.outcome in ("drained", "already_drained", "observed"):
            f = self._resume(f.id, now)
        return f

    # -- Slurm ---------------------------------------------------------------------------------

    def _drain(self, fault_id: str, now: float) -> Fault:
        f = self.book.faults[fault_id]
        reason = f.slurm_reason
        if self.policy.mode == "observe":
            log.warning("would_drain", fault=f.id, node=self.node or None, reason=reason,
                        command=f"scontrol update NodeName={self.node or '<node>'} "
                                f"State=DRAIN Reason=\"{reason}\"")
            return self._outcome(f, "drain", "observed", "observe mode: would drain "
                                 f"with Reason=\"{reason}\"")
        if self.slurm is None:
            log.warning("drain_without_scheduler", fault=f.id,
                        detail="mode is act but no [slurm] is configured")
            return self._outcome(f, "drain", "no_scheduler", "no [slurm] configured")
        f = self._replace(f, pending="drain")
        self._save()
        try:
            state = self.slurm.node_state()
            if state.drained:
                owner = fault_of_reason(state.reason)
                if owner == f.id:  # drained before a crash: done already
                    return self._outcome(f, "drain", "drained", "found drained with this "
                                         "fault's reason", count=False)
                if owner is not None and owner in self.book.faults:
                    return self._outcome(f, "drain", "already_drained",
                                         f"already drained by sigwatch for fault {owner}")
                return self._outcome(f, "drain", "kept_other_drain",
                                     f"already drained by someone else: {state.reason!r}",
                                     page=Severity.WARNING)
            counts = self.slurm.breaker_counts(now, state.partitions)
            local = sum(1 for t in self.book.drains if now - t <= 3600.0)
            verdict = breaker_verdict(counts, local_recent=local,
                                      max_share=self.limits.max_share,
                                      max_per_hour=self.limits.max_per_hour)
            if not verdict.allowed:
                if self.m is not None:
                    self.m.drain_breaker_open.set(1)
                log.error("drain_refused", fault=f.id, outcome=verdict.outcome,
                          detail=verdict.detail)
                self._retry_at[f.id] = now + self.limits.retry_seconds
                return self._outcome(f, "drain", verdict.outcome, verdict.detail,
                                     page=Severity.CRITICAL, keep_pending=True)
            self.slurm.drain(reason)
        except SlurmError as exc:
            log.error("slurm_action_failed", fault=f.id, action="drain", error=str(exc))
            self._retry_at[f.id] = now + self.limits.retry_seconds
            return self._outcome(f, "drain", "failed", str(exc), page=Severity.CRITICAL,
                                 keep_pending=True)
        self.book.drains.append(now)
        if self.m is not None:
            self.m.drain_breaker_open.set(0)
        log.warning("node_drained", fault=f.id, node=self.node, reason=reason)
        return self._outcome(f, "drain", "drained", f"Reason=\"{reason}\"",
                             page=Severity.ERROR)

    def _resume(self, fault_id: str, now: float) -> Fault:
        f = self.book.faults[fault_id]
        if self.policy.mode == "observe" or f.outcome == "observed":
            log.warning("would_resume", fault=f.id, node=self.node or None)
            return self._outcome(f, "resume", "observed", "observe mode: would resume the "
                                 "node if it were still drained with a sigwatch reason")
        if self.slurm is None:
            return self._outcome(f, "resume", "no_scheduler", "no [slurm] configured")
        f = self._replace(f, pending="resume")
        self._save()
        try:
            state = self.slurm.node_state()
            if not state.drained:
                return self._outcome(f, "resume", "not_drained",
                                     f"the node is not drained ({state.state})",
                                     page=Severity.WARNING)
            owner = fault_of_reason(state.reason)
            if owner is None or owner not in self.book.faults:
                return self._outcome(f, "resume", "not_ours",
                                     f"drained by someone else now: {state.reason!r}",
                                     page=Severity.WARNING)
            others = [o.id for o in self.book.faults.values()
                      if o.open and o.action == "drain" and o.id != f.id]
            if others:
                return self._outcome(f, "resume", "still_needed",
                                     f"fault(s) {', '.join(others)} still open")
            self.slurm.resume()
        except SlurmError as exc:
            log.error("slurm_action_failed", fault=f.id, action="resume", error=str(exc))
            self._retry_at[f.id] = now + self.limits.retry_seconds
            return self._outcome(f, "resume", "failed", str(exc), page=Severity.CRITICAL,
                                 keep_pending=True)
        log.warning("node_resumed", fault=f.id, node=self.node)
        return self._outcome(f, "resume", "resumed", f"cleared by {f.cleared_by}",
                             page=Severity.ERROR)

    def _outcome(self, f: Fault, action: str, outcome: str, detail: str, *,
                 page: Severity | None = None, keep_pending: bool = False,
                 count: bool = True) -> Fault:
        repeat = f.outcome == outcome and f.outcome_detail == detail
        f = self._replace(f, outcome=outcome, outcome_detail=detail[:500],
                          pending=f.pending if keep_pending else "",
                          event=None if repeat else f"{action}: {outcome}")
        if repeat:
            return f  # a retry that came to the same: said once
        if count and self.m is not None:
            self.m.node_actions.labels(action, outcome).inc()
        if page is not None:
            self._notice(f"node_{action}_{outcome}", f, page, detail)
        return f

    def _reconcile(self, now: float) -> None:
        """Finish what a crash interrupted (pending drains and resumes)."""
        for f in list(self.book.faults.values()):
            if f.pending == "drain" and f.open:
                log.info("pending_action", fault=f.id, action="drain")
                self._drain(f.id, now)
            elif f.pending == "resume" and not f.open:
                log.info("pending_action", fault=f.id, action="resume")
                self._resume(f.id, now)

    def _retry(self, now: float) -> None:
        for fid, at in list(self._retry_at.items()):
            f = self.book.faults.get(fid)
            if f is None or not f.pending:
                self._retry_at.pop(fid, None)
                continue
            if now < at:
                continue
            self._retry_at.pop(fid, None)
            if f.pending == "drain" and f.open:
                self._drain(fid, now)
            elif f.pending == "resume" and not f.open:
                self._resume(fid, now)

    # -- explicit clears dropped by the command line --------------------------------------------

    def _requests(self) -> None:
        folder = self.requests_dir
        if folder is None:
            return
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".json"))
        except OSError:
            return
        for name in names:
            path = folder / name
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
                fault_id, by = str(doc["fault"]), str(doc.get("by") or "unknown")
                note = str(doc.get("note") or "")
            except (OSError, ValueError, KeyError, TypeError) as exc:
                result = ClearResult(False, f"unreadable request {name}: {exc}")
            else:
                result = self.clear(fault_id, by=by, note=note)
            answer = folder / (name[: -len(".json")] + ".result")
            tmp = answer.with_suffix(".tmp")
            with contextlib.suppress(OSError):
                tmp.write_text(json.dumps({"ok": result.ok, "message": result.message}))
                os.replace(tmp, answer)
            with contextlib.suppress(OSError):
                path.unlink()

    # -- bookkeeping ---------------------------------------------------------------------------

    def _replace(self, f: Fault, *, event: str | None = None, **changes: Any) -> Fault:
        if event:
            history = (*f.history, (self.clock.time(), event))[-30:]
            changes["history"] = history
        new = dataclasses.replace(f, **changes)
        self.book.faults[f.id] = new
        self._dirty = True
        return new

    def _notice(self, kind: str, f: Fault, severity: Severity, detail: str) -> None:
        """A page about an action: a detection with no line, through the paging sinks."""
        if self.notify is None:
            return
        now = self.clock.time()
        titles = {
            "node_drain_drained": "Node Drained By sigwatch",
            "node_drain_refused_share": "Drain Refused: Too Many Nodes Drained",
            "node_drain_refused_rate": "Drain Refused: Too Many Drains This Hour",
            "node_drain_failed": "Slurm Drain Failed",
            "node_drain_kept_other_drain": "Node Already Drained By Someone Else",
            "node_resume_resumed": "Node Resumed By sigwatch",
            "node_resume_failed": "Slurm Resume Failed",
            "node_resume_not_ours": "Node Left Drained: Not sigwatch's Drain",
            "node_resume_not_drained": "Node Was Resumed By Someone Else",
            "fault_escalated": "Node Fault Escalated After Reboots",
        }
        steps = {
            "node_drain_refused_share": (
                ("A faulty node keeps taking jobs: check why so many nodes are drained by "
                "sigwatch before draining it by hand."),),
            "node_drain_refused_rate": (
                ("A faulty node keeps taking jobs: check why sigwatch drains so many nodes "
                "before draining it by hand."),),
            "fault_escalated": ("Drain the node and open a hardware ticket (RMA).",),
        }
        about = f"fault {f.id} ({f.signature}) on {self.node or 'this node'}: {detail}"
        notice = Detection(
            signature=f"sigwatch_{kind}", title=titles.get(kind, kind.replace("_", " ")),
            severity=severity, status="stable", source=f.source or "sigwatch",
            path=f"fault:{f.id}", stream_key=f"fault:{f.id}", line=None, offset=None,
            text=None, time=now, remediation=Remediation(
                summary=about, steps=steps.get(kind, ()), action="drain_node"),
            about=about, key=f"{f.id}:{kind}:{len(f.history)}",
            facts=(("fault", f.id), ("signature", f.signature), ("reason", f.slurm_reason)),
            host=self.node, owner=f.owner)
        try:
            self.notify(notice)
        except Exception as exc:  # noqa: BLE001 - paging must never stop the fault engine
            log.error("notice_failed", error=str(exc))

    def _publish(self) -> None:
        faults = sorted(self.book.faults.values(), key=lambda f: f.opened_at, reverse=True)
        before = [(f.id, f.state, f.outcome) for f in self._view]
        self._view = tuple(faults)
        if before != [(f.id, f.state, f.outcome) for f in faults]:
            self._save()  # a state or outcome changed: durable now
            self.version += 1
            if self.on_change is not None:
                self.on_change()
        if self.m is not None:
            for state in OPEN_STATES:
                self.m.faults_open.labels(state).set(sum(1 for f in faults if f.state == state))

    def _load(self) -> Any:
        from sigwatch.faults.store import FaultBook

        if self.store is None:
            return FaultBook()
        book = self.store.load()
        for problem in self.store.problems:
            log.error("fault_book_unusable", problem=problem)
        return book if book is not None else FaultBook()

    def _save(self) -> None:
        if not self._dirty or self.store is None:
            return
        try:
            self.store.save(self.book)
        except OSError as exc:
            log.error("fault_book_not_saved", error=str(exc))
            return
        self._dirty = False


def _outcome_text(f: Fault) -> str:
    if f.outcome == "resumed":
        return "node resumed"
    if f.outcome:
        return f"{f.outcome.replace('_', ' ')} ({f.outcome_detail})"
    return "no action was taken for it"
