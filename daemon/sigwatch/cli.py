"""Command line: ``run``, ``scan``, ``patterns``, ``check-config``. A stable interface.

Exit status: 0 success (``scan``: nothing found), 1 ``scan`` found detections or a check
failed, 2 usage, configuration, pattern or input error (one line each on stderr, naming the
file, the field and the reason).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

from sigwatch import __version__
from sigwatch.errors import InputError, PatternError, SigwatchError

if TYPE_CHECKING:
    from sigwatch.patterns.compiled import PatternSet

__all__ = ["main"]

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


class _LoadFailedError(SigwatchError):
    def __init__(self, errors: Sequence[PatternError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in errors))


def _load_patterns(dirs: Sequence[Path] | None) -> PatternSet:
    from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns

    patterns, errors = load_patterns(list(dirs) if dirs else [builtin_pattern_dir()])
    if errors:
        raise _LoadFailedError(errors)
    return patterns


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sigwatch",
        description="Recognise GPU training failures in logs, export metrics, hand on-call "
                    "the fix.")
    p.add_argument("--version", action="version", version=f"sigwatch {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="Run the daemon: tail files, export metrics and events.")
    run.add_argument("--config", type=Path, help="Config file (TOML). Flags override it.")
    run.add_argument("--watch", action="append", metavar="GLOB",
                     help="Files to tail (repeatable); replaces the configured sources.")
    run.add_argument("--patterns", action="append", type=Path, metavar="DIR",
                     help="Signature folders (repeatable); replace the built-in library.")
    run.add_argument("--listen", metavar="HOST:PORT", help="Where /metrics is served.")
    run.add_argument("--state-dir", type=Path, metavar="DIR",
                     help="Where offsets are checkpointed.")
    run.add_argument("--events", type=Path, metavar="FILE",
                     help="Append one JSON object per detection to FILE.")
    run.add_argument("--start-at", choices=["end", "beginning"],
                     help="Where to start in files present at the very first start.")
    run.add_argument("--no-console", action="store_true",
                     help="Do not print detections on stdout.")

    scan = sub.add_parser("scan", help="Read files once from the start and print detections.")
    scan.add_argument("--patterns", action="append", type=Path, metavar="DIR")
    scan.add_argument("--format", choices=["text", "json"], default="text")
    scan.add_argument("--min-severity", choices=["info", "warning", "error", "critical"],
                      default="info", help="Only report detections at or above this level.")
    scan.add_argument("files", nargs="+", metavar="FILE", help="Files to read; - is stdin.")

    pat = sub.add_parser("patterns", help="Inspect and check the signature library.")
    pat_sub = pat.add_subparsers(dest="patterns_command", required=True, metavar="ACTION")
    for name, text in (("list", "List signatures."), ("test", "Run every embedded example."),
                       ("lint", "Check the library's rules."),
                       ("catalogue", "Print the Markdown catalogue of the library.")):
        sp = pat_sub.add_parser(name, help=text)
        sp.add_argument("--patterns", action="append", type=Path, metavar="DIR")
    show = pat_sub.add_parser("show", help="Show one signature.")
    show.add_argument("id")
    show.add_argument("--patterns", action="append", type=Path, metavar="DIR")
    lint = pat_sub.choices["lint"]
    lint.add_argument("--relaxed", action="store_true",
                      help="Only the checks that apply to any user file, not library policy.")

    check = sub.add_parser("check-config", help="Validate a config file and its patterns.")
    check.add_argument("file", type=Path)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    if argv is None and sys.argv[1:2] == ["run"]:
        # Before anything slow: a SIGHUP during start-up must not kill the daemon.
        from sigwatch.process import EarlySignals

        EarlySignals.install()
    args = _parser().parse_args(argv)
    try:
        if args.command == "scan":
            return _scan(args, sys.stdout)
        if args.command == "patterns":
            return _patterns(args, sys.stdout)
        if args.command == "check-config":
            return _check_config(args.file, sys.stdout)
        if args.command == "run":
            return _run(args)
    except _LoadFailedError as exc:
        for err in exc.errors:
            print(f"sigwatch: {err}", file=sys.stderr)
        return EXIT_ERROR
    except SigwatchError as exc:
        print(f"sigwatch: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_ERROR


def _scan(args: argparse.Namespace, out: TextIO) -> int:
    from sigwatch.app import build_pipeline
    from sigwatch.clock import SystemClock
    from sigwatch.model import Severity, StreamInfo
    from sigwatch.scanning import scan_stream
    from sigwatch.sinks.base import CollectingSink
    from sigwatch.sinks.console import format_detection

    patterns = _load_patterns(args.patterns)
    sink = CollectingSink()
    pipeline = build_pipeline(patterns, [sink], clock=SystemClock())
    floor = Severity.parse(args.min_severity)
    found = 0
    for name in args.files:
        before = len(sink.detections)
        try:
            if name == "-":
                scan_stream(pipeline, StreamInfo("-", "-", "-"), sys.stdin.buffer)
            else:
                with open(name, "rb") as fh:
                    scan_stream(pipeline, StreamInfo(name, name, name), fh)
        except OSError as exc:
            raise InputError(f"{name}: cannot read: {exc.strerror}") from None
        for d in sink.detections[before:]:
            if d.severity < floor:
                continue
            found += 1
            if args.format == "json":
                out.write(json.dumps(d.to_json(), ensure_ascii=False) + "\n")
            else:
                out.write(format_detection(d) + "\n\n")
    return EXIT_FOUND if found else EXIT_OK


def _patterns(args: argparse.Namespace, out: TextIO) -> int:
    from sigwatch.checks.catalogue import render_catalogue
    from sigwatch.checks.lint import lint
    from sigwatch.checks.selftest import run_examples
    from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns

    action = args.patterns_command
    if action == "lint":
        dirs = args.patterns or [builtin_pattern_dir()]
        patterns, errors = load_patterns(dirs)
        findings = lint(patterns, errors, strict=not args.relaxed)
        for f in findings:
            print(f"{f.level}: {f.render()}", file=out)
        failed = [f for f in findings if f.level == "error"]
        print(f"lint: {len(patterns)} signatures, {len(failed)} errors, "
              f"{len(findings) - len(failed)} warnings", file=out)
        return EXIT_FOUND if failed else EXIT_OK
    patterns = _load_patterns(args.patterns)
    if action == "list":
        for sig in patterns.signatures:
            out.write(f"{sig.id:48} {sig.severity.label:8} {sig.action or '-':16} {sig.title}\n")
        return EXIT_OK
    if action == "show":
        shown = patterns.get(args.id)
        if shown is None:
            raise SigwatchError(f"no signature with id {args.id!r}")
        out.write(shown.path.read_text(encoding="utf-8"))
        return EXIT_OK
    if action == "catalogue":
        out.write(render_catalogue(patterns))
        return EXIT_OK
    results = run_examples(patterns)
    failures = [r for r in results if not r.passed]
    for r in failures:
        print(f"FAIL {r.describe()}", file=out)
    print(f"{len(results) - len(failures)} passed, {len(failures)} failed", file=out)
    return EXIT_FOUND if failures else EXIT_OK


def _check_config(path: Path, out: TextIO) -> int:
    from sigwatch.config import load_config

    config = load_config(path)
    patterns = _load_patterns(config.patterns or None)
    print(f"{path}: ok ({len(config.sources)} sources, {len(patterns)} signatures)", file=out)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from sigwatch.app import run_daemon
    from sigwatch.config import SourceConfig, load_config

    overrides: dict[str, object] = {
        "listen": args.listen, "state_dir": args.state_dir, "events": args.events,
        "patterns": args.patterns,
    }
    if args.no_console:
        overrides["console"] = False
    config = load_config(args.config, **overrides)
    if args.watch:
        start_at: Literal["end", "beginning"] = args.start_at or "end"
        config = config.model_copy(update={"sources": [
            SourceConfig(name="files", paths=list(args.watch), start_at=start_at)]})
    elif args.start_at:
        config = config.model_copy(update={"sources": [
            s.model_copy(update={"start_at": args.start_at}) for s in config.sources]})
    _load_patterns(config.patterns or None)  # fail fast, before anything starts
    return run_daemon(config)
