"""What the miner and the training detectors cost on the bench corpus (issue 13).

    python bench/miner_cost.py [--size-mb 64] [--work DIR]

Single core, file in page cache, 8 MiB chunks, best of ``--repeat`` runs. Rows:

- ``off``: read and count lines only (the floor every mode pays);
- ``interest scan``: each detector's ``interest`` regex over the chunk (``finditer``), hits
  mapped to line starts: the cheap C path the runtime runs on every byte;
- ``+ detectors``: the selected lines normalised and handed to the detectors (``on_line``),
  i.e. what the runtime adds with the detectors on;
- ``miner on every line``: the rejected alternative, mining every line (for comparison).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))
sys.path.insert(0, str(ROOT / "bench"))

from corpus import generate

from sigwatch.clock import FakeClock
from sigwatch.detectors.base import Detector, LineEvent, StreamContext
from sigwatch.detectors.burst import BurstDetector
from sigwatch.detectors.templates import NovelErrorDetector, TemplateMiner
from sigwatch.detectors.training import (
    BadNumbersDetector,
    ProgressReader,
    StallDetector,
    StepTimeDetector,
)
from sigwatch.framing.normalize import normalize
from sigwatch.model import LogLine, StreamInfo
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns

CHUNK = 8 << 20


class _NoRecent:
    def before(self, count: int) -> list[str]:
        return []


def _chunks(path: Path) -> list[bytes]:
    out: list[bytes] = []
    rest = b""
    with path.open("rb") as fh:
        while block := fh.read(CHUNK):
            data = rest + block
            cut = data.rfind(b"\n") + 1
            out.append(data[:cut])
            rest = data[cut:]
    return out


def _detectors(clock: FakeClock, which: str) -> list[Detector]:
    if which == "miner":
        novel = NovelErrorDetector(clock, learn_lines=2000)
        return [novel, BurstDetector(clock, miner=novel.miner)]
    reader = ProgressReader()
    return [StepTimeDetector(clock, reader=reader), StallDetector(clock, reader=reader),
            BadNumbersDetector(clock, reader=reader)]


def run(chunks: Sequence[bytes], which: str, deliver: bool) -> tuple[int, int]:
    """Scan every chunk; returns (lines, lines delivered to at least one detector)."""
    clock = FakeClock()
    detectors = _detectors(clock, which) if which != "off" else []
    info = StreamInfo("train", "train.log", "train.log")
    ctx = StreamContext(1, info)
    for d in detectors:
        d.on_open(ctx)
    lines = delivered = 0
    offset = 0
    for data in chunks:
        lines += data.count(b"\n")
        wanted: dict[int, list[Detector]] = {}
        for d in detectors:
            rx = d.interest
            if rx is None:
                continue
            pos = 0
            search = rx.search
            while (m := search(data, pos)) is not None:  # one hit per line is enough
                hit = m.start()
                start = data.rfind(b"\n", 0, hit) + 1
                wanted.setdefault(start, []).append(d)
                pos = data.find(b"\n", hit) + 1
                if pos == 0:
                    break
        delivered += len(wanted)
        if deliver:
            for start in sorted(wanted):
                end = data.find(b"\n", start)
                raw = data[start:end].decode("utf-8", "replace")
                for rank, text in normalize(raw):
                    line = LogLine(info, offset + start, 0, text, rank)
                    event = LineEvent(ctx, line, (), _NoRecent())
                    for d in wanted[start]:
                        d.on_line(event)
            clock.advance(1.0)
        offset += len(data)
    return lines, delivered


def mine_everything(chunks: Sequence[bytes]) -> tuple[int, int]:
    miner = TemplateMiner(header=True)
    lines = 0
    for data in chunks:
        for raw in data.split(b"\n")[:-1]:
            for _rank, text in normalize(raw.decode("utf-8", "replace")):
                miner.add(text)
            lines += 1
    return lines, lines


def timed(fn: Callable[[], tuple[int, int]], repeat: int) -> tuple[float, int, int]:
    best = float("inf")
    lines = delivered = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        lines, delivered = fn()
        best = min(best, time.perf_counter() - t0)
    return best, lines, delivered


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sigwatch-bench")
    ap.add_argument("--every-line-mb", type=int, default=8,
                    help="MB of the corpus used for the (slow) mine-every-line row")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = args.work / f"miner_cost_{args.size_mb}mb.log"
    if not corpus.exists():
        library, _errors = load_patterns([builtin_pattern_dir()])
        generate(corpus, args.size_mb << 20, library.signatures)
    chunks = _chunks(corpus)
    size = sum(len(c) for c in chunks)
    print(f"corpus {corpus}: {size / 1e6:.1f} MB")
    print(f"{'mode':<44}{'MB/s':>9}{'lines/s':>12}{'delivered':>11}")
    rows: list[tuple[str, Callable[[], tuple[int, int]], int]] = [
        ("off (read + count lines)", lambda: run(chunks, "off", False), size),
        ("error interest scan (miner path)", lambda: run(chunks, "miner", False), size),
        ("error interest + novel_error + burst", lambda: run(chunks, "miner", True), size),
        ("progress interest scan (training path)", lambda: run(chunks, "training", False),
         size),
        ("progress interest + step/stall/numbers", lambda: run(chunks, "training", True), size),
    ]
    small = []
    budget = args.every_line_mb << 20
    for c in chunks:
        if budget <= 0:
            break
        small.append(c[:budget] [: c[:budget].rfind(b"\n") + 1])
        budget -= len(small[-1])
    small_size = sum(len(c) for c in small)
    rows.append((f"miner on every line ({small_size / 1e6:.0f} MB)",
                 lambda: mine_everything(small), small_size))
    for name, fn, nbytes in rows:
        seconds, lines, delivered = timed(fn, args.repeat)
        share = f"{100 * delivered / lines:.1f}%" if lines else "-"
        print(f"{name:<44}{nbytes / seconds / 1e6:>9.1f}{lines / seconds:>12,.0f}{share:>11}",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
