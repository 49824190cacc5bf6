"""``sigwatch faults list|clear`` and ``sigwatch policy explain``.

``faults list`` reads the fault book of the config's state folder (written atomically by the
daemon, so reading it while the daemon runs is safe). ``faults clear`` asks the running daemon
to clear a fault, through a request file in ``<state_dir>/requests`` that only those who may
write the state folder (root) can drop; with no daemon running it takes the daemon's instance
lock and clears the fault itself through the same engine (resuming the node in Slurm when
sigwatch drained it). ``policy explain`` replays logs through the real engine and prints the
policy's decision on each detection; it never drains, resumes or writes anything.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import time
import uuid
from pathlib import Path
from typing import TextIO

from sigwatch.errors import SigwatchError
from sigwatch.faults.model import Decision, Fault

__all__ = ["clear_fault", "explain", "list_faults"]

EXIT_OK, EXIT_NOT_DONE, EXIT_ERROR = 0, 1, 2


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _describe(f: Fault) -> str:
    outcome = f.outcome.replace("_", " ") if f.outcome else "no action yet"
    line = (f"{f.id}  {f.state:10}  opened {_when(f.opened_at)}  {f.signature}\n"
            f"    {f.title} ({f.owner}, {f.severity}); seen {f.count}x, first at {f.where}\n"
            f"    action: {f.action}: {outcome}")
    if f.outcome_detail:
        line += f" ({f.outcome_detail})"
    if f.pending:
        line += f"\n    pending: {f.pending} (retried)"
    if f.state == "recovering" and f.recovering_since is not None:
        line += f"\n    recovering since {_when(f.recovering_since)} (rebooted)"
    if f.failed_reboots:
        line += f"\n    came back after {f.failed_reboots} reboot(s)"
    if f.cleared_at is not None:
        line += f"\n    cleared {_when(f.cleared_at)} by {f.cleared_by}"
        if f.note:
            line += f": {f.note}"
    return line


def list_faults(args: argparse.Namespace, out: TextIO) -> int:
    from sigwatch.config import load_config
    from sigwatch.faults.store import FaultStore

    config = load_config(args.config)
    store = FaultStore(config.state_dir)
    book = store.load()
    if book is None and store.problems:
        raise SigwatchError("; ".join(store.problems))
    faults = sorted(book.faults.values() if book else (), key=lambda f: f.opened_at,
                    reverse=True)
    shown = faults if args.all else [f for f in faults if f.open]
    if args.format == "json":
        out.write(json.dumps({"mode": config.policy.mode,
                              "faults": [f.to_json() for f in shown]}, ensure_ascii=False)
                  + "\n")
        return EXIT_OK
    if not shown:
        hidden = len(faults) - len(shown)
        more = f" ({hidden} cleared: --all lists them)" if hidden else ""
        out.write(f"no open fault on this node{more}\n")
        return EXIT_OK
    out.write(f"policy mode: {config.policy.mode}\n")
    for f in shown:
        out.write(_describe(f) + "\n")
    return EXIT_OK


def _who(given: str | None) -> str:
    if given:
        return given
    for name in ("SUDO_USER", "USER", "LOGNAME"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def clear_fault(args: argparse.Namespace, out: TextIO) -> int:
    from sigwatch.config import load_config
    from sigwatch.faults.verdict import daemon_pid

    config = load_config(args.config)
    by, note = _who(args.by), str(args.note or "")
    state_dir = config.state_dir
    if daemon_pid(state_dir) is None:
        from sigwatch.process import InstanceLock, InstanceLockedError

        lock = InstanceLock(state_dir)
        try:
            lock.acquire()
        except InstanceLockedError:
            pass  # a daemon started meanwhile: ask it
        except OSError as exc:
            raise SigwatchError(f"{state_dir}: cannot take the lock: {exc.strerror}") from None
        else:
            try:
                return _clear_here(config, args.id, by, note, out)
            finally:
                lock.release()
    return _ask_daemon(state_dir, args.id, by, note, args.timeout, out)


def _clear_here(config: object, fault_id: str, by: str, note: str, out: TextIO) -> int:
    from sigwatch.app import build_faults
    from sigwatch.clock import SystemClock
    from sigwatch.config import Config
    from sigwatch.telemetry.logging import configure_logging

    assert isinstance(config, Config)
    configure_logging(level="warning")
    engine = build_faults(config, clock=SystemClock(), metrics=None, patterns=None)
    result = engine.clear(fault_id, by=by, note=note)
    engine.close()
    out.write(result.message + " (no daemon running: cleared here)\n")
    return EXIT_OK if result.ok else EXIT_NOT_DONE


def _ask_daemon(state_dir: Path, fault_id: str, by: str, note: str, timeout: float,
                out: TextIO) -> int:
    folder = state_dir / "requests"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        name = f"clear-{uuid.uuid4().hex}"
        tmp = folder / f"{name}.tmp"
        tmp.write_text(json.dumps({"fault": fault_id, "by": by, "note": note}))
        os.replace(tmp, folder / f"{name}.json")
    except OSError as exc:
        raise SigwatchError(f"{folder}: cannot write the request: {exc.strerror}") from None
    answer = folder / f"{name}.result"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            doc = json.loads(answer.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            time.sleep(0.05)
            continue
        answer.unlink(missing_ok=True)
        out.write(str(doc.get("message")) + "\n")
        return EXIT_OK if doc.get("ok") else EXIT_NOT_DONE
    (folder / f"{name}.json").unlink(missing_ok=True)
    raise SigwatchError(f"the running daemon did not answer within {timeout:g} s "
                        f"(request in {folder})")


def explain(args: argparse.Namespace, out: TextIO) -> int:
    from sigwatch.app import build_faults, build_pipeline, slurm_node_name
    from sigwatch.clock import SystemClock
    from sigwatch.config import load_config
    from sigwatch.model import StreamInfo
    from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
    from sigwatch.scaninputs import open_input
    from sigwatch.scanning import scan_stream
    from sigwatch.telemetry.logging import configure_logging

    configure_logging(level="error")
    overrides: dict[str, object] = {"patterns": args.patterns,
                                    "add_patterns": args.add_patterns}
    config = load_config(args.config, **overrides)
    dirs = (list(config.patterns) or [builtin_pattern_dir()]) + list(config.add_patterns)
    patterns, errors = load_patterns(dirs)
    if errors:
        raise SigwatchError("; ".join(str(e) for e in errors[:5]))
    node = args.node or slurm_node_name(config)
    decisions: list[Decision] = []
    opened: list[str] = []
    engine = build_faults(config, clock=SystemClock(), metrics=None,
                          patterns=lambda: patterns, check=patterns, persistent=False)
    engine.on_decision = decisions.append
    mode = config.policy.mode
    out.write(f"policy mode: {mode}" + (" (nothing would be done: observe only logs)\n"
                                        if mode == "observe" else "\n"))
    pipeline = build_pipeline(patterns, [engine], clock=SystemClock())
    for name in args.logs:
        try:
            reader = open_input(name)
        except OSError as exc:
            raise SigwatchError(f"{name}: cannot read: {exc.strerror}") from None
        try:
            scan_stream(pipeline, StreamInfo(name, name, name), reader, kind="scan")
        finally:
            if name != "-":
                reader.close()
        for d in decisions:
            out.write(_decision_line(d, engine, node, mode) + "\n")
            if d.decision in ("opened", "escalated") and d.fault_id:
                opened.append(d.fault_id)
        decisions.clear()
    out.write(f"{len(opened)} fault(s) would open" + (f": {', '.join(opened)}\n" if opened
                                                      else "\n"))
    return EXIT_NOT_DONE if opened else EXIT_OK


def _decision_line(d: Decision, engine: object, node: str, mode: str) -> str:
    from sigwatch.faults.engine import FaultEngine

    assert isinstance(engine, FaultEngine)
    head = (f"{_when(d.time)}  {d.where}  {d.signature} ({d.owner}, {d.severity}): "
            f"{d.decision.upper()}: {d.detail}")
    if d.decision not in ("opened", "escalated"):
        return head
    fault = next((f for f in engine.faults() if f.id == d.fault_id), None)
    if fault is None or fault.action != "drain":
        return head
    command = (f"scontrol update NodeName={node} State=DRAIN "
               f"Reason=\"{fault.slurm_reason}\"")
    verb = "would run" if mode == "act" else "observe mode would only log"
    return f"{head}\n    {verb}: {command}"
