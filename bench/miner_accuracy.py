"""Grouping Accuracy of sigwatch's template miner and of Drain3 on labelled Loghub samples.

    python bench/miner_accuracy.py --data DIR [--data DIR2 ...]
    SIGWATCH_LOGHUB=DIR python bench/miner_accuracy.py
    python bench/miner_accuracy.py --data DIR --raw     # whole raw lines instead of Content

DIR holds one ``<System>/`` folder per Loghub 2k sample (from the logpai/loghub repository),
each with its ``*_structured.csv``.

Grouping Accuracy (Zhu et al., ICSE-SEIP 2019): a line is correct only when the set of lines its
parser put in its group equals the set of lines sharing its ground-truth EventId.

Both miners get exactly the same input (the ``Content`` column of each ``*_structured.csv``,
the benchmark's convention) and ONE configuration for every system:

- sigwatch: ``TemplateMiner()`` defaults;
- Drain3 defaults: ``TemplateMinerConfig()`` (sim_th 0.4, depth 4, no masking);
- Drain3 masked: sim_th 0.5, depth 4, generic masks for IPs, hex and numbers (the one
  system-independent setting in the spirit of logparser's benchmark; its per-dataset
  regexes would be per-system tuning).

Drain3 is a test/bench dependency only (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

from sigwatch.detectors.templates import TemplateMiner

DATA_ENV = "SIGWATCH_LOGHUB"

__all__ = [
    "drain3_default",
    "drain3_masked",
    "grouping_accuracy",
    "load_system",
    "score",
    "sigwatch",
]

Parser = Callable[[Sequence[str]], list[str]]


def load_system(folder: Path) -> tuple[str, list[str], list[str], list[str]]:
    """(name, contents, event ids, raw lines) of one ``<System>/<System>_2k.log_structured.csv``."""
    structured = next(folder.glob("*_structured.csv"))
    name = structured.name.split("_")[0]
    with structured.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    raw_path = structured.with_name(structured.name.replace("_structured.csv", ""))
    raw = raw_path.read_text(encoding="utf-8", errors="replace").splitlines()
    return name, [r["Content"] for r in rows], [r["EventId"] for r in rows], raw[: len(rows)]


def grouping_accuracy(truth: Sequence[str], predicted: Sequence[object]) -> float:
    """Fraction of lines whose predicted group is exactly their ground-truth group."""
    truth_size: dict[str, int] = defaultdict(int)
    for t in truth:
        truth_size[t] += 1
    groups: dict[object, list[int]] = defaultdict(list)
    for i, p in enumerate(predicted):
        groups[p].append(i)
    correct = 0
    for members in groups.values():
        labels = {truth[i] for i in members}
        if len(labels) == 1 and truth_size[next(iter(labels))] == len(members):
            correct += len(members)
    return correct / len(truth) if truth else 0.0


def sigwatch(lines: Sequence[str], *, header: bool = False) -> list[str]:
    """Two passes (learn, then read the final template of each line), as Drain's benchmark does."""
    miner = TemplateMiner(header=header)
    ids = [miner.add(line).template_id for line in lines]
    final: list[str] = []
    for line, tid in zip(lines, ids, strict=True):
        tpl = miner.match(line)
        final.append(str(tpl.id) if tpl is not None else f"gone-{tid}")
    return final


def _drain3(lines: Sequence[str], *, masked: bool) -> list[str]:
    # drain3 ships no type information; it is the baseline, imported only here.
    from drain3 import TemplateMiner as Drain3Miner  # type: ignore[import-untyped]
    from drain3.masking import MaskingInstruction  # type: ignore[import-untyped]
    from drain3.template_miner_config import (  # type: ignore[import-untyped]
        TemplateMinerConfig,
    )

    cfg = TemplateMinerConfig()
    cfg.profiling_enabled = False
    if masked:
        cfg.drain_sim_th = 0.5
        cfg.drain_depth = 4
        edge_l, edge_r = r"((?<=[^A-Za-z0-9])|^)", r"((?=[^A-Za-z0-9])|$)"
        cfg.masking_instructions = [
            MaskingInstruction(edge_l + r"(\d{1,3}(\.\d{1,3}){3}(:\d+)?)" + edge_r, "IP"),
            MaskingInstruction(edge_l + r"(0x[0-9a-fA-F]+)" + edge_r, "HEX"),
            MaskingInstruction(edge_l + r"([0-9a-fA-F]{16,})" + edge_r, "HEX"),
            MaskingInstruction(edge_l + r"([-+]?\d+(\.\d+)?)" + edge_r, "NUM"),
        ]
    miner = Drain3Miner(config=cfg)
    ids = [miner.add_log_message(line)["cluster_id"] for line in lines]
    # the final cluster of each line, as logparser's offline evaluation sees it
    out: list[str] = []
    for line, cid in zip(lines, ids, strict=True):
        cluster = miner.match(line, full_search_strategy="fallback")
        out.append(str(cluster.cluster_id if cluster is not None else cid))
    return out


def drain3_default(lines: Sequence[str]) -> list[str]:
    return _drain3(lines, masked=False)


def drain3_masked(lines: Sequence[str]) -> list[str]:
    return _drain3(lines, masked=True)


def score(folders: Sequence[Path], *, raw: bool = False) -> list[tuple[str, dict[str, float]]]:
    """Grouping Accuracy per system and parser."""
    parsers: dict[str, Parser] = {
        "sigwatch": (lambda ls: sigwatch(ls, header=raw)),
        "drain3_default": drain3_default,
        "drain3_masked": drain3_masked,
    }
    rows: list[tuple[str, dict[str, float]]] = []
    for folder in folders:
        name, content, truth, raw_lines = load_system(folder)
        lines = raw_lines if raw else content
        rows.append((name, {p: grouping_accuracy(truth, f(lines)) for p, f in parsers.items()}))
    return rows


def _systems(data: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for d in data:
        out.extend(sorted(p.parent for p in d.glob("*/*_structured.csv")))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", action="append", type=Path,
                    help=f"Folder of <System>/ sub-folders (repeatable). Default: ${DATA_ENV}")
    ap.add_argument("--raw", action="store_true",
                    help="Feed whole raw lines (headers included) instead of the Content column")
    ap.add_argument("--format", choices=["text", "markdown"], default="text")
    args = ap.parse_args(argv)
    data = args.data or ([Path(os.environ[DATA_ENV])] if os.environ.get(DATA_ENV) else [])
    if not data:
        print(f"no Loghub data: give --data DIR or set {DATA_ENV}=DIR", file=sys.stderr)
        return 2
    folders = _systems(data)
    if not folders:
        print(f"no *_structured.csv under {', '.join(map(str, data))}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    rows = score(folders, raw=args.raw)
    cols = ["sigwatch", "drain3_default", "drain3_masked"]
    avg = {c: sum(r[c] for _, r in rows) / len(rows) for c in cols}
    if args.format == "markdown":
        print("| system | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for name, r in [*rows, ("**average**", avg)]:
            print(f"| {name} | " + " | ".join(f"{r[c]:.4f}" for c in cols) + " |")
    else:
        print(f"{'system':<12}" + "".join(f"{c:>16}" for c in cols) + "   sigwatch >= both")
        for name, r in [*rows, ("average", avg)]:
            ok = r["sigwatch"] >= max(r["drain3_default"], r["drain3_masked"]) - 1e-9
            print(f"{name:<12}" + "".join(f"{r[c]:>16.4f}" for c in cols)
                  + f"   {'yes' if ok else 'NO'}")
    print(f"({len(rows)} systems, {time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
