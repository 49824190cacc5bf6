#!/usr/bin/env python3
"""800,000 repeats of one Xid line: one incident with the right count, flat memory, throughput.

Not a test: it prints a table. Each mode runs in its own process (so peak RSS is its own):

- ``fold``: the daemon's pipeline as ``build_daemon`` wires it (the full library, incident
  folding, the job book with one active job, the counters, the event log on disk, the status
  page's store) reading a kernel log (``content = "kernel"``) that holds N copies of one
  ``NVRM: Xid ... 79`` line with a few lines of noise between;
- ``nofold``: the same without folding (every occurrence to every sink), the peer.

    .venv/bin/python bench/fold_bench.py              # 800,000 repeats
    .venv/bin/python bench/fold_bench.py --repeats 100000

Printed per mode: wall seconds, lines and MB per second, the resident memory after each
quarter of the input and at the end (flat: it does not grow with the repeats), peak RSS, what
the status page counts for the incident, its count updates, and the event log's records.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

XID = ("May 18 19:02:39 gpu-node-7 kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=123456, "
       "name=python, GPU has fallen off the bus.\n")
NOISE = "May 18 19:02:39 gpu-node-7 kernel: mlx5_core 0000:3b:00.0: poll_health:739 ok\n"
CHUNK_LINES = 8192


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def child(mode: str, repeats: int, workdir: Path) -> dict[str, object]:
    from prometheus_client import CollectorRegistry

    from sigwatch.clock import SystemClock
    from sigwatch.detectors.folding import Folder
    from sigwatch.detectors.jobs import JobBook
    from sigwatch.framing.lines import LineFramer
    from sigwatch.model import StreamInfo
    from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
    from sigwatch.pipeline import Engine, Pipeline
    from sigwatch.sinks.eventlog import EventLogSink
    from sigwatch.sinks.metrics import MetricsSink
    from sigwatch.sources.base import StreamOpened
    from sigwatch.telemetry.metrics import JobCollector, SelfMetrics
    from sigwatch.web.incidents import build_incidents
    from sigwatch.web.store import DetectionStore, StatusPageSink

    patterns, errors = load_patterns([builtin_pattern_dir()])
    assert not errors, errors
    clock = SystemClock()
    registry = CollectorRegistry()
    metrics = SelfMetrics(registry, "bench")
    book = JobBook()
    registry.register(JobCollector("gpu-node-7", book.rows))
    events = workdir / f"events-{mode}.jsonl"
    eventlog = EventLogSink(events, fsync=False)
    store = DetectionStore(None)
    pipeline = Pipeline(Engine(patterns), [MetricsSink(metrics), eventlog, StatusPageSink(store)],
                        clock=clock, metrics=metrics, host="gpu-node-7",
                        content={"kernel": "kernel"}, jobs=book,
                        folder=Folder() if mode == "fold" else None)
    # One job runs on the node (its rank log wrote a line): the kernel fault is its fault.
    job = pipeline.new_handle()
    pipeline.open(StreamOpened(job, StreamInfo("training", "/training/4471203/rank0.log",
                                               "job", job="4471203", rank="0")))
    framer = LineFramer()
    pipeline.process(job, framer.feed(b"step 1 loss 2.0\n"))
    kernel = pipeline.new_handle()
    pipeline.open(StreamOpened(kernel, StreamInfo("kernel", "/var/log/kern.log", "kern"),
                               kind="file"))
    framer = LineFramer()
    per_block = CHUNK_LINES // 4 * 3  # three Xid lines and one of noise, repeated
    blocks = -(-repeats // per_block)
    last = repeats - (blocks - 1) * per_block
    data = ((XID * 3 + NOISE) * (CHUNK_LINES // 4)).encode()
    tail = ((XID * 3 + NOISE) * (last // 3) + XID * (last % 3)).encode()
    rss: list[float] = []
    marks = {max(1, blocks * q // 4) for q in (1, 2, 3, 4)}
    start = time.perf_counter()
    cpu0 = time.process_time()
    size = 0
    lines = 0
    for i in range(1, blocks + 1):
        chunk = data if i < blocks else tail
        size += len(chunk)
        lines += chunk.count(b"\n")
        pipeline.process(kernel, framer.feed(chunk))
        pipeline.tick()
        pipeline.flush()  # the runtime makes the sinks durable after every pass
        if i in marks:
            rss.append(round(_rss_mb(), 1))
    pipeline.report_incidents()
    pipeline.flush()
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    eventlog.close()
    incidents = [i for i in build_incidents(store.items(), now=clock.time())
                 if i.key[0] == "nvidia_xid_79_fallen_off_bus"]
    with open(events, "rb") as fh:
        records = sum(1 for _ in fh)
    return {
        "mode": mode, "repeats": repeats, "lines": lines,
        "megabytes": round(size / 1e6, 1), "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2), "lines_per_s": round(lines / wall),
        "lines_per_cpu_s": round(lines / cpu), "mb_per_s": round(size / 1e6 / wall, 2),
        "rss_quarters_mb": rss,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "incidents": len(incidents), "incident_count": incidents[0].count if incidents else 0,
        "incident_job": incidents[0].key[2] if incidents else "",
        "status_page_items": len(store.items()),
        "event_log_records": records, "event_log_mb": round(events.stat().st_size / 1e6, 1),
        "first_fault_gauge": registry.get_sample_value(
            "sigwatch_job_fault_first_seconds",
            {"node": "gpu-node-7", "job": "4471203", "rank": "",
             "signature": "nvidia_xid_79_fallen_off_bus", "owner": "node",
             "severity": "critical"}) is not None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=800_000)
    ap.add_argument("--child", choices=["fold", "nofold"])
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--modes", default="fold,nofold")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeats, args.workdir)))
        return 0
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo / "daemon"))
    results = []
    with tempfile.TemporaryDirectory(prefix="sigwatch-fold-") as tmp:
        for mode in args.modes.split(","):
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode, "--repeats", str(args.repeats),
                 "--workdir", tmp], env=env, check=True, capture_output=True, text=True)
            results.append(json.loads(out.stdout))
    keys = ["repeats", "lines", "megabytes", "wall_s", "cpu_s", "lines_per_s", "lines_per_cpu_s",
            "mb_per_s",
            "rss_quarters_mb", "peak_rss_mb", "incidents", "incident_count", "incident_job",
            "status_page_items", "event_log_records", "event_log_mb", "first_fault_gauge"]
    print(f"{'':22}" + "".join(f"{r['mode']:>26}" for r in results))
    for key in keys:
        print(f"{key:22}" + "".join(f"{r[key]!s:>26}" for r in results))
    fold = next((r for r in results if r["mode"] == "fold"), None)
    if fold is not None:
        ok = fold["incidents"] == 1 and fold["incident_count"] == fold["repeats"]
        print(f"\none incident with the right count: {'yes' if ok else 'NO'}")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
