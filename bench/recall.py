#!/usr/bin/env python3
"""Recall and false alarms of the signature library on the real corpus (``tests/corpus/real``).

Each excerpt is one TOML file, ``tests/corpus/real/<family>/<slug>.toml``, with ``url``, ``kind``,
``class``, ``expect`` ("alarm" or "quiet"), optional ``signatures``, optional ``lang`` (``zh`` for
a Chinese-language page; English when absent) and the verbatim ``text``.
``at_collection`` ("caught" or "missed", optional) records what the library did with the excerpt
when it was added, before any signature was written or changed for it: the blind figure.
``batch`` names the collection batch it was stamped with and ``stamped_against`` the commit of the
library it was judged by (both written by ``--stamp``); batches sort by name with their numbers
read as numbers (b10 after b9), so "the last N" blind failures are the newest batches' (excerpts
stamped before batches existed count as the oldest).
An excerpt that expects an alarm is caught when the real engine, run as ``sigwatch scan`` runs it
(signatures and every detector, the generic layer included), makes a detection at warning or
above (one of ``signatures`` when the file names any). A quiet excerpt must make none.

    ./dev.sh recall            # table per class and overall; exit 1 below EXPECTED.toml or on
                               # any false alarm
    ./dev.sh recall --misses   # also print what each missed or false-alarming excerpt produced
    ./dev.sh recall --generic-only  # the generic layer alone: no signature, no other detector
    ./dev.sh recall --stamp --batch b1-2026-11-25 tests/corpus/real/x/new.toml ...
                               # record at_collection (and the batch and the library's commit)
                               # in NEW excerpts, before touching patterns/

The floor is ``tests/corpus/real/EXPECTED.toml``; docs/signatures.md cites it.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import tomllib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "daemon"))

from sigwatch.app import build_detectors, build_generic, build_pipeline  # noqa: E402
from sigwatch.clock import FakeClock  # noqa: E402
from sigwatch.model import Detection, Severity, StreamInfo  # noqa: E402
from sigwatch.patterns.compiled import PatternSet  # noqa: E402
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns  # noqa: E402
from sigwatch.pipeline import Engine  # noqa: E402
from sigwatch.scanning import scan_bytes  # noqa: E402
from sigwatch.sinks.base import CollectingSink  # noqa: E402

__all__ = [
    "CORPUS",
    "Blind",
    "EXPECTED",
    "Excerpt",
    "Outcome",
    "Report",
    "build_engine",
    "detect",
    "evaluate",
    "evaluate_generic_only",
    "load_corpus",
    "load_corpus_files",
    "load_expected",
    "blind_figures",
    "blind_order",
    "main",
    "render",
    "stamp",
]

CORPUS = REPO / "tests" / "corpus" / "real"
EXPECTED = CORPUS / "EXPECTED.toml"
KINDS = frozenset({"issue", "forum", "docs", "paste", "source", "logbook", "blog"})
LANGS = frozenset({"en", "zh"})
LAST_N = 100  # the blind figure is also reported over the newest LAST_N blind failures
ALARM_FLOOR = Severity.WARNING


@dataclass(frozen=True, slots=True)
class Excerpt:
    """One verbatim excerpt and what the library should do with it."""

    path: Path
    url: str
    kind: str
    cls: str
    expect: str
    signatures: tuple[str, ...]
    text: str
    at_collection: str | None = None
    lang: str = "en"
    batch: str = ""
    stamped_against: str = ""

    @property
    def name(self) -> str:
        return f"{self.path.parent.name}/{self.path.stem}"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the engine made of one excerpt."""

    excerpt: Excerpt
    detections: tuple[Detection, ...]
    ok: bool

    @property
    def loud(self) -> tuple[Detection, ...]:
        return tuple(d for d in self.detections if d.severity >= ALARM_FLOOR)


@dataclass(slots=True)
class Report:
    """Counts per class and overall."""

    outcomes: list[Outcome] = field(default_factory=list)

    def per_class(self, excluding: frozenset[str] = frozenset(),
                  ) -> dict[str, tuple[int, int, int, int]]:
        """class -> (failures, caught, healthy, false alarms); ``excluding``: excerpt names
        left out (the open misses EXPECTED.toml lists)."""
        rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for o in self.outcomes:
            if o.excerpt.name in excluding:
                continue
            row = rows[o.excerpt.cls]
            if o.excerpt.expect == "alarm":
                row[0] += 1
                row[1] += o.ok
            else:
                row[2] += 1
                row[3] += not o.ok
        return {k: (v[0], v[1], v[2], v[3]) for k, v in sorted(rows.items())}

    @property
    def failures(self) -> int:
        return sum(o.excerpt.expect == "alarm" for o in self.outcomes)

    @property
    def caught(self) -> int:
        return sum(o.ok for o in self.outcomes if o.excerpt.expect == "alarm")

    @property
    def healthy(self) -> int:
        return sum(o.excerpt.expect == "quiet" for o in self.outcomes)

    @property
    def false_alarms(self) -> int:
        return sum(not o.ok for o in self.outcomes if o.excerpt.expect == "quiet")

    @property
    def recall(self) -> float:
        return self.caught / self.failures if self.failures else 1.0

    def min_class_recall(self, excluding: frozenset[str] = frozenset()) -> float:
        values = [caught / n for n, caught, _h, _f in self.per_class(excluding).values() if n]
        return min(values, default=1.0)


def load_corpus(root: Path = CORPUS) -> list[Excerpt]:
    """Every excerpt file below ``root``; raises ValueError naming a malformed file."""
    return load_corpus_files(sorted(root.glob("*/*.toml")))


def load_corpus_files(paths: Sequence[Path]) -> list[Excerpt]:
    """These excerpt files; raises ValueError naming a malformed file."""
    out: list[Excerpt] = []
    for path in paths:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        unknown = set(data) - {"url", "kind", "class", "expect", "signatures", "text",
                               "at_collection", "lang", "batch", "stamped_against"}
        problems = [f"unknown key {k!r}" for k in sorted(unknown)]
        if not str(data.get("url", "")).startswith(("https://", "http://")):
            problems.append("url must be a public http(s) address")
        if data.get("kind") not in KINDS:
            problems.append(f"kind must be one of {sorted(KINDS)}")
        if data.get("expect") not in ("alarm", "quiet"):
            problems.append("expect must be 'alarm' or 'quiet'")
        if data.get("at_collection") not in (None, "caught", "missed"):
            problems.append("at_collection must be 'caught' or 'missed'")
        if data.get("lang", "en") not in LANGS:
            problems.append(f"lang must be one of {sorted(LANGS)}")
        if ("batch" in data or "stamped_against" in data) and "at_collection" not in data:
            problems.append("batch and stamped_against are written by --stamp with at_collection")
        if not data.get("class") or not str(data.get("text", "")).strip():
            problems.append("class and text are required")
        if problems:
            raise ValueError(f"{path}: {'; '.join(problems)}")
        out.append(Excerpt(path, data["url"], data["kind"], data["class"], data["expect"],
                           tuple(data.get("signatures", ())), data["text"],
                           data.get("at_collection"), data.get("lang", "en"),
                           str(data.get("batch", "")), str(data.get("stamped_against", ""))))
    return out


def load_expected(path: Path = EXPECTED) -> dict[str, float]:
    """The recorded floor: ``recall`` (overall) and ``class_recall`` (every class)."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {"recall": float(data["recall"]), "class_recall": float(data["class_recall"])}


def load_open(path: Path = EXPECTED) -> dict[str, str]:
    """The open misses: excerpt name -> why it is not caught yet. They count in the overall
    recall but not in the per-class floor, and each must still be missed (a list that says
    more than the truth fails the test command). A healthy excerpt listed here is an open
    false alarm: it counts in the false alarms printed, and must still raise one."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    table = data.get("open", {})
    if not isinstance(table, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in table.items()):
        raise ValueError(f"{path}: open: a table of excerpt name = 'the reason it is missed'")
    return dict(table)


def build_engine(patterns: PatternSet | None = None) -> Engine:
    """The built-in library compiled once; every excerpt is scanned with it."""
    if patterns is None:
        patterns, errors = load_patterns([builtin_pattern_dir()])
        if errors:
            raise SystemExit("\n".join(str(e) for e in errors))
    return Engine(patterns)


def detect(engine: Engine, text: str, name: str) -> list[Detection]:
    """Every detection the real runtime makes on ``text`` (as ``sigwatch scan`` does).

    The one place that calls the runtime: swap this body when its API changes.
    """
    sink = CollectingSink()
    clock = FakeClock()
    pipeline = build_pipeline(engine, [sink], clock=clock, detectors=build_detectors(clock=clock))
    scan_bytes(pipeline, StreamInfo("recall", name, name), text.encode("utf-8"))
    return list(sink.detections)


def judge(excerpt: Excerpt, detections: Sequence[Detection]) -> bool:
    """True when the engine did what the excerpt expects."""
    loud = [d for d in detections if d.severity >= ALARM_FLOOR]
    if excerpt.expect == "quiet":
        return not loud
    if excerpt.signatures:
        return any(d.signature in excerpt.signatures for d in loud)
    return bool(loud)


def evaluate_generic_only(excerpts: Sequence[Excerpt]) -> Report:
    """Every excerpt through the generic layer alone (an empty library, no other detector)."""
    engine = Engine(PatternSet(()))
    report = Report()
    for ex in excerpts:
        sink = CollectingSink()
        clock = FakeClock()
        pipeline = build_pipeline(engine, [sink], clock=clock,
                                  detectors=[build_generic(clock=clock)])
        scan_bytes(pipeline, StreamInfo("recall", ex.name, ex.name), ex.text.encode("utf-8"))
        found = tuple(sink.detections)
        plain = dataclasses.replace(ex, signatures=())  # any loud detection counts here
        report.outcomes.append(Outcome(ex, found, judge(plain, found)))
    return report


def evaluate(engine: Engine, excerpts: Sequence[Excerpt]) -> Report:
    """Run every excerpt through the engine."""
    report = Report()
    for ex in excerpts:
        found = tuple(detect(engine, ex.text, ex.name))
        report.outcomes.append(Outcome(ex, found, judge(ex, found)))
    return report


def render(report: Report, *, misses: bool = False) -> str:
    """The table ``./dev.sh recall`` prints."""
    lines = [f"{'class':32} {'failures':>8} {'caught':>6} {'recall':>6} "
             f"{'healthy':>7} {'false':>5}"]
    for cls, (n, caught, healthy, false) in report.per_class().items():
        recall = f"{caught / n:.2f}" if n else "-"
        lines.append(f"{cls:32} {n:8} {caught:6} {recall:>6} {healthy:7} {false:5}")
    lines.append(f"{'overall':32} {report.failures:8} {report.caught:6} "
                 f"{report.recall:6.3f} {report.healthy:7} {report.false_alarms:5}")
    classes = sum(1 for n, *_ in report.per_class().values() if n)
    lines.append(f"corpus: {len(report.outcomes)} excerpts ({report.failures} failures in "
                 f"{classes} classes, {report.healthy} healthy); lowest class recall "
                 f"{report.min_class_recall():.2f}")
    kinds: dict[str, int] = defaultdict(int)
    for o in report.outcomes:
        kinds[o.excerpt.kind] += 1
    lines.append("sources: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    langs: dict[str, int] = defaultdict(int)
    for o in report.outcomes:
        langs[o.excerpt.lang] += 1
    lines.append("languages: " + ", ".join(f"{k} {n}" for k, n in sorted(langs.items())))
    lines.extend(render_blind(report))
    if misses:
        for o in report.outcomes:
            if o.ok:
                continue
            what = "FALSE ALARM" if o.excerpt.expect == "quiet" else "MISSED"
            got = ", ".join(f"{d.signature}({d.severity.label})" for d in o.detections)
            lines.append(f"{what} {o.excerpt.name} [{o.excerpt.cls}]: {got or 'nothing'}")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Blind:
    """The blind figure of one group: failures caught at collection, healthy kept quiet."""

    failures: int
    caught: int
    healthy: int
    quiet: int

    @property
    def recall(self) -> float:
        return self.caught / self.failures if self.failures else 1.0

    def render(self) -> str:
        out = (f"{self.caught}/{self.failures} failures caught = {self.recall:.2f}"
               if self.failures else "no failures")
        if self.healthy:
            out += f"; {self.quiet}/{self.healthy} healthy quiet"
        return out


def _blind(excerpts: Sequence[Excerpt]) -> Blind:
    failures = [e for e in excerpts if e.expect == "alarm"]
    healthy = [e for e in excerpts if e.expect == "quiet"]
    return Blind(len(failures), sum(e.at_collection == "caught" for e in failures),
                 len(healthy), sum(e.at_collection == "caught" for e in healthy))


def batch_key(batch: str) -> tuple[tuple[int, int | str], ...]:
    """A batch name's collection order: its numbers compared as numbers ("b10" after "b9")."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"(\d+)", batch) if part)


def blind_order(excerpts: Sequence[Excerpt]) -> list[Excerpt]:
    """Stamped excerpts in collection order: by batch (unnamed first), then by file."""
    stamped = [e for e in excerpts if e.at_collection]
    return sorted(stamped, key=lambda e: (batch_key(e.batch), str(e.path)))


def blind_figures(excerpts: Sequence[Excerpt]) -> dict[str, Blind]:
    """The blind figure overall, per batch, per kind of source, per language and over the
    newest ``LAST_N`` blind failures."""
    ordered = blind_order(excerpts)
    out: dict[str, Blind] = {"all batches": _blind(ordered)}
    for batch in sorted({e.batch for e in ordered}, key=batch_key):
        out[f"batch {batch or '(before batches)'}"] = _blind([e for e in ordered
                                                              if e.batch == batch])
    for kind in sorted({e.kind for e in ordered}):
        out[f"kind {kind}"] = _blind([e for e in ordered if e.kind == kind])
    for lang in sorted({e.lang for e in ordered}):
        out[f"lang {lang}"] = _blind([e for e in ordered if e.lang == lang])
    failures = [e for e in ordered if e.expect == "alarm"]
    if len(failures) > LAST_N:
        out[f"last {LAST_N} failures"] = _blind(failures[-LAST_N:])
    return out


def render_blind(report: Report) -> list[str]:
    """Lines for the blind figure (at collection, before any signature changed for them)."""
    figures = blind_figures([o.excerpt for o in report.outcomes])
    if not figures["all batches"].failures and not figures["all batches"].healthy:
        return []
    lines = ["at collection (blind, before any signature was changed for them):"]
    lines += [f"  {name:32} {fig.render()}" for name, fig in figures.items()]
    return lines


def _head_commit() -> str:
    """The commit of the library doing the judging (``unknown`` outside a git checkout)."""
    import subprocess
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--",
                                "patterns", "daemon"], capture_output=True, text=True,
                               timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def stamp(engine: Engine, paths: Sequence[Path], batch: str = "",
          against: str = "") -> list[str]:
    """Write ``at_collection`` into excerpt files that do not carry it yet; refuse re-stamping.

    Run it once, when the excerpts are added and before patterns/ changes for them, so that the
    recorded figure stays blind.
    """
    done = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if "at_collection" in tomllib.loads(text):
            raise SystemExit(f"{path}: at_collection is already recorded; it is never re-stamped")
        ex = next(e for e in load_corpus_files([path]))
        ok = judge(ex, detect(engine, ex.text, ex.name))
        outcome = "caught" if ok else "missed"  # for a quiet excerpt: caught = stayed quiet
        head, sep, rest = text.partition("\ntext = ")
        extra = f"\nbatch = '{batch}'" if batch else ""
        extra += f"\nstamped_against = '{against}'" if against else ""
        path.write_text(f"{head}\nat_collection = '{outcome}'{extra}{sep}{rest}",
                        encoding="utf-8")
        done.append(f"{outcome:7} {ex.name}")
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--misses", action="store_true",
                        help="List every missed excerpt and every false alarm.")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--stamp", type=Path, nargs="+", default=[],
                        help="Record at_collection in these new excerpt files and exit.")
    parser.add_argument("--batch", default="",
                        help="With --stamp: the batch name to record (sorts in collection "
                             "order, e.g. b1-2026-11-25).")
    parser.add_argument("--generic-only", action="store_true",
                        help="Measure the generic layer on its own: no signature, no other "
                             "detector (what it catches of wordings no signature was written "
                             "for). Reports; never fails on the floor.")
    args = parser.parse_args(argv)
    if args.generic_only:
        report = evaluate_generic_only(load_corpus(args.corpus))
        print(render(report, misses=args.misses).split("\nat collection")[0])
        return 1 if report.false_alarms else 0
    if args.stamp:
        if args.batch and not all(ch.isalnum() or ch in "-_." for ch in args.batch):
            parser.error("--batch: letters, digits, '-', '_' and '.' only")
        print("\n".join(stamp(build_engine(), args.stamp, args.batch, _head_commit())))
        return 0
    report = evaluate(build_engine(), load_corpus(args.corpus))
    print(render(report, misses=args.misses))
    floor = load_expected()
    failed = []
    if report.recall < floor["recall"]:
        failed.append(f"recall {report.recall:.3f} < {floor['recall']} (EXPECTED.toml)")
    open_misses = frozenset(load_open())
    if report.min_class_recall(open_misses) < floor["class_recall"]:
        failed.append(f"a class is below {floor['class_recall']} recall (open misses aside)")
    alarms = [o.excerpt.name for o in report.outcomes
              if o.excerpt.expect == "quiet" and not o.ok and o.excerpt.name not in open_misses]
    if alarms:
        failed.append(f"{len(alarms)} false alarm(s) on healthy excerpts (open ones aside)")
    for problem in failed:
        print(f"recall: FAIL: {problem}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
