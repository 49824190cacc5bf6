"""Reliability table: every checklist scenario, lines written / matched / lost / duplicated.

Run with ``make reliability``. In-process scenarios drive the real runtime with a fake
clock (latency there is in poll passes x 1 s poll interval); the ``*_process`` rows run the real
``sigwatch run`` process with the real clock and measure detection latency from the write to
the event's timestamp. Exits non-zero if any silent loss or duplicate is seen.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(REPO / "tests" / "reliability"))

import structlog  # noqa: E402
from harness import (  # noqa: E402
    duplicates,
    read_event_seqs,
    read_seq_events,
    start_daemon_process,
    write_patterns,
)
from scenarios import SCENARIOS, Result  # noqa: E402


def _event_times(path: Path) -> dict[int, float]:
    """When each seq's event was written (its ``time``), first occurrence."""
    out: dict[int, float] = {}
    for seq, doc in read_seq_events(path):
        stamp = datetime.fromisoformat(doc["time"].replace("Z", "+00:00")).timestamp()
        out.setdefault(seq, stamp)
    return out


def process_scenario(name: str, *, kills: int, rotate_every: int, lines: int) -> Result:
    """The real daemon; a writer with rename rotation; optional SIGKILLs; real latency."""
    tmp = Path(tempfile.mkdtemp(prefix=f"sigwatch-{name}-"))
    (tmp / "logs").mkdir()
    write_patterns(tmp)
    path = tmp / "logs" / "app.log"
    rng = random.Random(7)
    daemon = start_daemon_process(tmp)
    deadline = time.monotonic() + 20
    while b"tail_starting" not in (tmp / "daemon.log").read_bytes():
        if time.monotonic() > deadline:
            raise RuntimeError("daemon did not start")
        time.sleep(0.05)
    written: dict[int, float] = {}
    next_kill = sorted(rng.sample(range(1, lines), kills)) if kills else []
    fh = open(path, "ab", buffering=0)  # noqa: SIM115
    gen = 0
    for seq in range(1, lines + 1):
        fh.write(f"ERROR seq={seq} payload\nINFO step {seq}\n".encode())
        written[seq] = time.time()
        if seq % rotate_every == 0:
            gen += 1
            os.rename(path, f"{path}.{gen}")
            fh.close()
            fh = open(path, "ab", buffering=0)  # noqa: SIM115
        if next_kill and seq == next_kill[0]:
            next_kill.pop(0)
            daemon.send_signal(signal.SIGKILL)
            daemon.wait()
            daemon = start_daemon_process(tmp)
        time.sleep(0.004)
    fh.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(set(read_event_seqs(tmp / "events.jsonl"))) < lines:
        time.sleep(0.1)
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=20)
    except subprocess.TimeoutExpired:
        daemon.kill()
    got = read_event_seqs(tmp / "events.jsonl")
    times = _event_times(tmp / "events.jsonl")
    lat = sorted(max(0.0, times[s] - written[s]) for s in times if s in written)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0
    missing = set(written) - set(got)
    dup = sum(c - 1 for c in duplicates(got).values())
    note = f"real process, {kills} SIGKILLs" if kills else "real process"
    return Result(name, len(written), len(set(got) & set(written)), 0, len(missing), dup, p99,
                  note + " (latency includes restarts)" if kills else note)


def _latency(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} s"


def main() -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    rows: list[Result] = []
    for name, run in SCENARIOS:
        with tempfile.TemporaryDirectory(prefix=f"sigwatch-{name}-") as tmp:
            rows.append(run(Path(tmp)))
    rows.append(process_scenario("steady_append_process", kills=0, rotate_every=10**9,
                                 lines=2000))
    rows.append(process_scenario("rotation_process", kills=0, rotate_every=200, lines=2000))
    rows.append(process_scenario("sigkill_process", kills=20, rotate_every=300, lines=3000))
    print("| scenario | lines written | lines matched | lost (declared, counted) | lost (undeclared) "
          "| duplicated | p99 detection latency | notes |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r.name} | {r.written} | {r.matched} | {r.lost_declared} | {r.lost_silent} "
              f"| {r.duplicated} | {_latency(r.p99_latency)} | {r.notes} |")
    bad = [r.name for r in rows if r.lost_silent or r.duplicated]
    if bad:
        print(f"\nFAILED: silent loss or duplicates in {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
