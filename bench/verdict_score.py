"""Culprit accuracy of the shipped verdict (SigwatchJobIncident) on random failure cascades.

    .venv/bin/python bench/verdict_score.py [--cascades 200] [--seed 1] [--keep DIR]

Each cascade (tests/support/cascades.py) draws a job layout (4 to 16 nodes, 4 or 8 ranks
each), a root fault (a GPU off the bus, a rank that stops entering collectives, an InfiniBand
port going down, the same Python exception on every rank, an exception on one rank, a node
1.4x slower than the others), the culprit, the NCCL timeout (8 s to 10 min), a kernel line
written late (up to 12 s after the others' timeouts), noise (benign lines, an unrelated
corrected-ECC warning), each node's clock skew (up to 2 s) and the PyTorch release whose
wordings the ranks print. Its logs go through real daemons built in-process, one per node on
its own simulated clock (tests/support/verdict_sim.py); promtool evaluates the SHIPPED rules
(deploy/prometheus/rules/sigwatch.rules.yml) on what they exported, every 5 s.

Prints the accuracy (the job's verdict names the right owner, node and rank; if the verdict
was refined after it fired, e.g. from "stalled, culprit unknown" at the stall detector's 5
minutes to the lagging rank once the NCCL timeouts print, the earlier one named no other
node), how many verdicts were refined (each is a second notification in the job's Alertmanager
group), the failures where a node was named for a user-owned failure, the straggler warnings,
and the simulated time from the first fault line to the first verdict (scrape and evaluation on
one 5 s grid; Alertmanager's delivery is measured by
tests/integration/test_fleet_jobs_end_to_end.py).
Exits non-zero below 0.95 or if a node is ever named for a user-owned failure.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "daemon"))
sys.path.insert(0, str(REPO / "tests"))

import structlog  # noqa: E402
from support.cascades import KINDS, random_cascade  # noqa: E402
from support.verdict_sim import Run, SimFleet, evaluate, judge  # noqa: E402

NODES = tuple(f"gpu-node-{i:02d}" for i in range(16))
GAP = 900.0  # simulated seconds between cascades: longer than any collateral window (600 s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cascades", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="keep the logs and the promtool file here")
    parser.add_argument("--promtool", default=shutil.which("promtool") or "promtool")
    parser.add_argument("--verbose", action="store_true", help="print every cascade")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="verdict-score-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    started = time.monotonic()
    fleet = SimFleet(workdir / "nodes", NODES, start=float(int(time.time())))
    runs: list[tuple[str, Run]] = []
    try:
        for i in range(args.cascades):
            cascade = random_cascade(rng, start=fleet.now + GAP, job=f"job-{i:03d}",
                                     node_names=NODES, kinds=KINDS)
            runs.append((f"c{i:03d}", fleet.run(cascade)))
            if args.verbose:
                print(f"  simulated {i + 1}/{args.cascades}", file=sys.stderr)
    finally:
        fleet.stop()
    simulated = time.monotonic() - started
    results = evaluate(runs, workdir, promtool=args.promtool)
    elapsed = time.monotonic() - started

    by_kind: dict[str, Counter[str]] = {}
    latencies: list[float] = []
    user_named = refined = 0
    failing = right_failing = 0
    for name, run in runs:
        cascade = run.cascade
        right, said, latency = judge(cascade, results[name])
        counts = by_kind.setdefault(cascade.kind, Counter())
        counts["right" if right else "wrong"] += 1
        if cascade.expected.fails:
            failing += 1
            right_failing += right
            if latency is not None:
                latencies.append(latency)
        refined += " -> " in said
        if cascade.expected.owner == "user" and any(
                f.labels.get("culprit_node") for f in results[name]
                if f.labels.get("alertname") == "SigwatchJobIncident"):
            user_named += 1
        if args.verbose or not right:
            exp = cascade.expected
            print(f"{'ok  ' if right else 'MISS'} {name} {cascade.kind:9s} {cascade.release}"
                  f" nodes={len(cascade.layout.nodes)} expected={exp.owner or 'straggler'}"
                  f" {exp.culprit_node or exp.straggler or '-'} said: {said}")
    accuracy = right_failing / failing if failing else 0.0
    print()
    print(f"verdict score: {args.cascades} cascades (seed {args.seed}), {failing} failing jobs")
    print(f"{'kind':10s} {'right':>6s} {'wrong':>6s}")
    for kind in KINDS:
        c = by_kind.get(kind, Counter())
        print(f"{kind:10s} {c['right']:6d} {c['wrong']:6d}")
    print(f"culprit accuracy: {accuracy:.3f} ({right_failing}/{failing})")
    print(f"nodes named for a user-owned failure: {user_named}")
    print(f"verdicts refined after they fired (a second notification in the job's group, e.g."
          f" 'stalled, no culprit' then the lagging rank once the timeouts print): {refined}")
    if latencies:
        latencies.sort()
        print(f"first fault line -> verdict firing (simulated, 5 s scrape and evaluation):"
              f" median {statistics.median(latencies):.1f} s, p95"
              f" {latencies[int(0.95 * (len(latencies) - 1))]:.1f} s, max {latencies[-1]:.1f} s")
    print(f"run time: {elapsed:.0f} s ({simulated:.0f} s simulating, the rest promtool)")
    if args.keep is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if accuracy >= 0.95 and user_named == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
