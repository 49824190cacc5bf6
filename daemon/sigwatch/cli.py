"""Command line: ``run``, ``scan``, ``patterns``, ``check-config``, ``health``, ``faults``,
``policy``. A stable interface.

Exit status: 0 success (``scan``: nothing found), 1 ``scan`` found detections or a check
failed, 2 usage, configuration, pattern or input error (one line each on stderr, naming the
file, the field and the reason). ``health``: 0 healthy, 1 a node fault is open, 3 a source
cannot read, 4 no daemon runs on the config's state folder (or it stopped reporting).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TextIO

from sigwatch.errors import PatternError, SigwatchError

if TYPE_CHECKING:
    from sigwatch.model import Detection
    from sigwatch.patterns.compiled import PatternSet

__all__ = ["main"]

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2
EXIT_SIGPIPE = 128 + 13  # as a shell reports a process ended by SIGPIPE


class _LoadFailedError(SigwatchError):
    def __init__(self, errors: Sequence[PatternError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in errors))


def _pattern_dirs(args: argparse.Namespace) -> list[Path]:
    """``--patterns`` replaces the built-in library; ``--add-patterns`` adds to it."""
    from sigwatch.patterns.loader import builtin_pattern_dir

    base = list(getattr(args, "patterns", None) or []) or [builtin_pattern_dir()]
    return base + list(getattr(args, "add_patterns", None) or [])


def _builtin() -> list[Path]:
    from sigwatch.patterns.loader import builtin_pattern_dir

    return [builtin_pattern_dir()]


def _load_patterns(dirs: Sequence[Path] | None) -> PatternSet:
    from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns

    patterns, errors = load_patterns(list(dirs) if dirs else [builtin_pattern_dir()])
    if errors:
        raise _LoadFailedError(errors)
    return patterns


class _Version(argparse.Action):
    """``--version``, looked up only when asked: the package metadata is slow to read, and
    ``sigwatch health`` (a prolog, a health check) must answer fast."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from sigwatch import __version__

        print(f"sigwatch {__version__}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sigwatch",
        description="Recognise GPU training failures in logs, export metrics, hand on-call "
                    "the fix.")
    p.add_argument("--version", action=_Version, nargs=0,
                   help="show program's version number and exit")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="Run the daemon: tail files, export metrics and events.")
    run.add_argument("--config", type=Path, help="Config file (TOML). Flags override it.")
    run.add_argument("--watch", action="append", metavar="GLOB",
                     help="Files to tail (repeatable); replaces the configured sources.")
    run.add_argument("--patterns", action="append", type=Path, metavar="DIR",
                     help="Signature folders (repeatable); replace the built-in library.")
    run.add_argument("--add-patterns", action="append", type=Path, metavar="DIR",
                     help="Site signature folders (repeatable), loaded with the built-in "
                          "library.")
    run.add_argument("--listen", metavar="HOST:PORT", help="Where /metrics is served.")
    run.add_argument("--state-dir", type=Path, metavar="DIR",
                     help="Where offsets are checkpointed.")
    run.add_argument("--events", type=Path, metavar="FILE",
                     help="Append one JSON object per detection to FILE.")
    run.add_argument("--start-at", choices=["end", "beginning"],
                     help="Where to start in files present at the very first start.")
    run.add_argument("--alertmanager", action="append", metavar="URL",
                     help="Page through this Alertmanager (repeatable: every replica).")
    run.add_argument("--alert-resolve-after", type=float, metavar="SECONDS",
                     help="Resolve a page after this long without a repeat.")
    run.add_argument("--node", metavar="NAME",
                     help="The node label of pages and detections (default: the host name); "
                          "$VAR or ${VAR} takes it from the environment (NODE_NAME in a "
                          "DaemonSet).")
    run.add_argument("--input-format", choices=["auto", "cri", "docker", "plain"],
                     help="How file sources are read: container log records (cri, docker), "
                          "plain lines, or auto (recognised per file from its first line; "
                          "the default).")
    run.add_argument("--no-console", action="store_true",
                     help="Do not print detections on stdout.")

    ex = sub.add_parser(
        "exec", help="Run a command, pass its output through, match it live.",
        description="Run COMMAND with its stdout and stderr passed through unchanged while "
                    "both are matched; exits with COMMAND's status (128+N after signal N). "
                    "Detections go to stderr, --events and --listen.")
    ex.add_argument("--patterns", action="append", type=Path, metavar="DIR",
                    help="Signature folders (repeatable); replace the built-in library.")
    ex.add_argument("--events", type=Path, metavar="FILE",
                    help="Append one JSON object per detection to FILE.")
    ex.add_argument("--listen", metavar="HOST:PORT",
                    help="Serve /metrics while the command runs (default: no listener).")
    ex.add_argument("--no-console", action="store_true",
                    help="Do not print detections on stderr.")
    ex.add_argument("--source", default="exec", metavar="NAME",
                    help="The source label of this command's output (default: exec).")
    ex.add_argument("--node", metavar="NAME",
                    help="The node label of detections and job gauges (default: the host "
                         "name). The job and rank come from the launcher's environment "
                         "(SLURM_JOB_ID, RANK, ...; see docs/fleet.md).")
    ex.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND...",
                    help="The command and its arguments.")

    scan = sub.add_parser("scan", help="Read files once from the start and print detections.")
    scan.add_argument("--patterns", action="append", type=Path, metavar="DIR",
                      help="Signature folders (repeatable); replace the built-in library.")
    scan.add_argument("--add-patterns", action="append", type=Path, metavar="DIR",
                      help="Site signature folders added to the built-in library.")
    scan.add_argument("--format", choices=["text", "json"], default="text")
    scan.add_argument("--no-detectors", dest="detectors", action="store_false",
                      help="Signatures only: skip the detectors beyond signatures (step-time "
                           "regressions and incident 004, bad numbers, bursts, novel errors), "
                           "which run by default as in the daemon.")
    scan.add_argument("--detectors", dest="detectors", action="store_true",
                      help="DEPRECATED: the detectors run by default; kept as a no-op.")
    scan.add_argument("--no-generic", dest="generic", action="store_false",
                      help="Leave out the generic layer (tracebacks, native crashes, error "
                           "records and failed checks caught by their shape), which runs by "
                           "default with the other detectors.")
    scan.add_argument("--color", choices=["auto", "always", "never"], default="auto",
                      help="Colour the text output (auto: on a terminal, unless NO_COLOR).")
    scan.add_argument("--min-severity", choices=["info", "warning", "error", "critical"],
                      default="info", help="Only report detections at or above this level.")
    scan.add_argument("--input-format", choices=["auto", "cri", "docker", "plain"],
                      default="auto",
                      help="Read inputs as container logs (cri: Kubernetes pod logs, docker: "
                           "json-file) or plain lines; auto (default) recognises each input "
                           "from its first line.")
    scan.add_argument("files", nargs="+", metavar="FILE",
                      help="Files to read (gzip, bzip2 and xz are decompressed), folders "
                           "(read recursively); - is stdin.")

    pat = sub.add_parser("patterns", help="Inspect and check the signature library.")
    pat_sub = pat.add_subparsers(dest="patterns_command", required=True, metavar="ACTION")
    for name, text in (("list", "List signatures."), ("test", "Run every embedded example."),
                       ("lint", "Check the library's rules."),
                       ("catalogue", "Print the Markdown catalogue of the library.")):
        sp = pat_sub.add_parser(name, help=text)
        sp.add_argument("--patterns", action="append", type=Path, metavar="DIR")
        sp.add_argument("--add-patterns", action="append", type=Path, metavar="DIR")
    show = pat_sub.add_parser("show", help="Show one signature.")
    show.add_argument("id")
    show.add_argument("--patterns", action="append", type=Path, metavar="DIR")
    show.add_argument("--add-patterns", action="append", type=Path, metavar="DIR")
    pat_sub.choices["list"].add_argument("--format", choices=["text", "json"], default="text")
    lint = pat_sub.choices["lint"]
    lint.add_argument("--relaxed", action="store_true",
                      help="Only the checks that apply to any user file, not library policy.")

    check = sub.add_parser("check-config", help="Validate a config file and its patterns.")
    check.add_argument("file", type=Path)

    health = sub.add_parser(
        "health", help="Ask the running daemon for its verdict on this node (one line).",
        description="Find the daemon the config describes (by its state folder) and print its "
                    "verdict in one line: exit 0 healthy, 1 a node fault is open, 3 a source "
                    "cannot read, 4 no daemon (or it stopped reporting). For Slurm's "
                    "HealthCheckProgram, a job prolog or epilog, and anything else that asks.")
    health.add_argument("--config", type=Path, help="The daemon's config file (TOML).")

    flt = sub.add_parser("faults", help="List or clear this node's faults.")
    flt_sub = flt.add_subparsers(dest="faults_command", required=True, metavar="ACTION")
    flist = flt_sub.add_parser("list", help="List the open faults (--all: cleared ones too).")
    flist.add_argument("--config", type=Path, help="The daemon's config file (TOML).")
    flist.add_argument("--all", action="store_true", help="Also list cleared faults.")
    flist.add_argument("--format", choices=["text", "json"], default="text")
    fclear = flt_sub.add_parser(
        "clear", help="Clear a fault by hand (resumes the node if sigwatch drained it).")
    fclear.add_argument("id", help="The fault id (faults list shows it).")
    fclear.add_argument("--config", type=Path, help="The daemon's config file (TOML).")
    fclear.add_argument("--by", help="Who clears it (default: the user running this).")
    fclear.add_argument("--note", default="", help="Why (kept with the fault).")
    fclear.add_argument("--timeout", type=float, default=60.0,
                        help="Seconds to wait for the running daemon's answer.")

    pol = sub.add_parser("policy", help="Replay logs through the policy.")
    pol_sub = pol.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    explain = pol_sub.add_parser(
        "explain", help="Replay logs through the real engine and print each policy decision.",
        description="Read LOG files from the start through the same engine and policy as the "
                    "daemon (nothing is drained, nothing is written) and print what the policy "
                    "decides for each detection. Exit 1 when a fault would open, else 0.")
    explain.add_argument("--config", type=Path, help="The daemon's config file (TOML).")
    explain.add_argument("--patterns", action="append", type=Path, metavar="DIR")
    explain.add_argument("--add-patterns", action="append", type=Path, metavar="DIR")
    explain.add_argument("--node", metavar="NAME", help="The Slurm node name to show.")
    explain.add_argument("logs", nargs="+", metavar="LOG", help="Log files to replay.")

    tpl = sub.add_parser("templates", help="Print the mined template id and text of each line.")
    tpl.add_argument("--format", choices=["text", "csv"], default="text")
    tpl.add_argument("files", nargs="+", metavar="FILE", help="Files to read; - is stdin.")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    if argv is None and sys.argv[1:2] == ["run"]:
        # Called directly (not through sigwatch.entry): at least before anything slow.
        from sigwatch.entry import EarlySignals

        EarlySignals.install()
    given = sys.argv[1:] if argv is None else list(argv)
    if given[:1] == ["health"] and "-h" not in given and "--help" not in given:
        return _health(given[1:])  # without building the whole parser: answer fast
    args = _parser().parse_args(argv)
    try:
        return _dispatch(args)
    except BrokenPipeError:
        # The reader went away (``sigwatch patterns list | head``): not an error worth a
        # traceback. Point stdout at /dev/null so the interpreter's final flush is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_SIGPIPE


def _health(argv: list[str]) -> int:
    """``sigwatch health [--config FILE]`` (``sigwatch health --help`` for the text)."""
    from sigwatch.faults.verdict import main_health

    p = argparse.ArgumentParser(prog="sigwatch health")
    p.add_argument("--config", type=Path)
    args = p.parse_args(argv)
    return main_health(args.config, sys.stdout, sys.stderr)


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command == "scan":
            return _scan(args, sys.stdout)
        if args.command == "patterns":
            return _patterns(args, sys.stdout)
        if args.command == "check-config":
            return _check_config(args.file, sys.stdout)
        if args.command == "run":
            return _run(args)
        if args.command == "templates":
            from sigwatch.templating import print_templates

            return print_templates(args.files, sys.stdout, fmt=args.format)
        if args.command == "exec":
            return _exec(args)
        if args.command == "health":
            return _health(["--config", str(args.config)] if args.config else [])
        if args.command == "faults":
            from sigwatch.faults_cli import clear_fault, list_faults

            if args.faults_command == "list":
                return list_faults(args, sys.stdout)
            return clear_fault(args, sys.stdout)
        if args.command == "policy":
            from sigwatch.faults_cli import explain

            return explain(args, sys.stdout)
    except _LoadFailedError as exc:
        for err in exc.errors:
            print(f"sigwatch: {err}", file=sys.stderr)
        return EXIT_ERROR
    except SigwatchError as exc:
        print(f"sigwatch: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_ERROR


def _scan(args: argparse.Namespace, out: TextIO) -> int:
    from sigwatch.app import build_pipeline, tune_gc
    from sigwatch.clock import SystemClock
    from sigwatch.model import Severity, StreamInfo
    from sigwatch.scaninputs import COMPRESSION_ERRORS, open_input, scan_inputs
    from sigwatch.scanning import scan_stream
    from sigwatch.sinks.base import CollectingSink
    from sigwatch.sinks.console import Style, format_report, use_colour

    patterns = _load_patterns(_pattern_dirs(args))
    sink = CollectingSink()
    clock = SystemClock()
    detectors = []
    if args.detectors:
        from sigwatch.app import build_detectors

        detectors = build_detectors(clock=clock, generic=args.generic)
    pipeline = build_pipeline(patterns, [sink], clock=clock, detectors=detectors)
    tune_gc()
    floor = Severity.parse(args.min_severity)
    shown: list[Detection] = []
    unreadable = 0
    for item in scan_inputs(list(args.files)):
        name = item.path
        if item.note:
            print(f"sigwatch: {name}: {item.note}", file=sys.stderr)
            continue
        before = len(sink.detections)
        try:
            if item.error:
                raise OSError(item.error)
            reader = open_input(name)
            try:
                scan_stream(pipeline, StreamInfo(name, name, name), reader, kind="scan",
                            fmt=args.input_format)
                damage = getattr(reader, "error", None)
                if damage is not None:
                    raise damage
            finally:
                if name != "-":
                    reader.close()
        except COMPRESSION_ERRORS as exc:
            reason = (exc.strerror if isinstance(exc, OSError) and exc.strerror
                      else str(exc) or type(exc).__name__)
            print(f"sigwatch: {name}: cannot read: {reason}", file=sys.stderr)
            unreadable += 1
        for d in sink.detections[before:]:
            if d.severity < floor:
                continue
            shown.append(d)
            if args.format == "json":  # streamed: one object per line as it is found
                out.write(json.dumps(d.to_json(), ensure_ascii=False) + "\n")
    if args.format == "text":
        style = Style(use_colour(out, args.color))
        out.write(format_report(shown, inputs=len(args.files), style=style))
    if unreadable:  # an incomplete scan is never "clean"
        return EXIT_ERROR
    return EXIT_FOUND if shown else EXIT_OK


def _patterns(args: argparse.Namespace, out: TextIO) -> int:
    from sigwatch.checks.catalogue import render_catalogue
    from sigwatch.checks.lint import lint
    from sigwatch.checks.selftest import run_examples
    from sigwatch.patterns.loader import load_patterns

    action = args.patterns_command
    if action == "lint":
        patterns, errors = load_patterns(_pattern_dirs(args))
        findings = lint(patterns, errors, strict=not args.relaxed)
        for f in findings:
            print(f"{f.level}: {f.render()}", file=out)
        failed = [f for f in findings if f.level == "error"]
        print(f"lint: {len(patterns)} signatures, {len(failed)} errors, "
              f"{len(findings) - len(failed)} warnings", file=out)
        return EXIT_FOUND if failed else EXIT_OK
    patterns = _load_patterns(_pattern_dirs(args))
    if action == "list":
        for sig in patterns.signatures:
            if args.format == "json":
                out.write(json.dumps({
                    "id": sig.id, "title": sig.title, "severity": sig.severity.label,
                    "status": sig.status, "action": sig.action or None,
                    "steps": len(sig.steps), "labels": dict(sig.labels),
                    "remediation": sig.remediation.to_json(),
                    "file": str(sig.path)}, ensure_ascii=False) + "\n")
            else:
                out.write(f"{sig.id:48} {sig.severity.label:8} {sig.action or '-':16} "
                          f"{sig.title}\n")
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
    from sigwatch.patterns.loader import load_patterns
    from sigwatch.web.server import build_ssl_context, check_bind

    config = load_config(path)
    problems: list[str] = []
    patterns, errors = load_patterns(
        (list(config.patterns) or _builtin()) + list(config.add_patterns))
    problems += [str(e) for e in errors]
    if not errors:
        from sigwatch.app import policy_problems

        problems += [f"{path}: {field}: {why}" for field, why in policy_problems(config, patterns)]
    try:
        check_bind(config.listen)
    except SigwatchError as exc:
        problems.append(f"{path}: listen: {exc}")
    tls = config.web.tls_config()
    if tls is not None:
        try:
            build_ssl_context(tls)
        except SigwatchError as exc:
            problems.append(f"{path}: web.tls_server_config: {exc}")
    for field, folder in (("state_dir", config.state_dir),
                          ("events", config.events.parent if config.events else None)):
        if folder is not None and not _usable_folder(folder):
            problems.append(f"{path}: {field}: {folder} cannot be created or written")
    for problem in problems:
        print(f"sigwatch: {problem}", file=sys.stderr)
    if problems:
        return EXIT_ERROR
    print(f"{path}: ok ({len(config.sources)} sources, {len(patterns)} signatures)", file=out)
    return EXIT_OK


def _usable_folder(folder: Path) -> bool:
    """The folder exists and is writable, or its nearest existing parent is."""
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)


def _exec(args: argparse.Namespace) -> int:
    from sigwatch.execute import ExecOptions, run_exec
    from sigwatch.telemetry.logging import configure_logging

    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("sigwatch: exec: no command given (sigwatch exec [options] -- COMMAND...)",
              file=sys.stderr)
        return EXIT_ERROR
    if args.listen:
        from sigwatch.web.server import ListenAddressError, parse_listen

        try:
            parse_listen(args.listen)
        except ListenAddressError as exc:
            raise SigwatchError(str(exc)) from None
    configure_logging(level="warning")
    node = ""
    if args.node:
        from sigwatch.config import expand_env_reference

        try:
            node = expand_env_reference(args.node)
        except ValueError as exc:
            raise SigwatchError(f"exec: --node: {exc}") from None
    options = ExecOptions(patterns=tuple(args.patterns or ()), events=args.events,
                          listen=args.listen, console=not args.no_console, source=args.source,
                          node=node)
    return run_exec(command, options)


def _run(args: argparse.Namespace) -> int:
    from sigwatch.app import run_daemon
    from sigwatch.config import AlertingSettings, SourceConfig, load_config

    overrides: dict[str, object] = {
        "listen": args.listen, "state_dir": args.state_dir, "events": args.events,
        "patterns": args.patterns, "add_patterns": args.add_patterns, "node": args.node,
    }
    if args.no_console:
        overrides["console"] = False
    config = load_config(args.config, **overrides)
    paging: dict[str, object] = {}
    if args.alertmanager:
        paging["alertmanagers"] = list(args.alertmanager)
    if args.alert_resolve_after is not None:
        paging["resolve_after"] = args.alert_resolve_after
    if paging:
        try:
            alerting = AlertingSettings.model_validate({**config.alerting.model_dump(),
                                                        **paging})
        except ValueError as exc:
            raise SigwatchError(f"--alertmanager/--alert-resolve-after: {exc}") from None
        config = config.model_copy(update={"alerting": alerting})
    if args.watch:
        start_at: Literal["end", "beginning"] = args.start_at or "end"
        config = config.model_copy(update={"sources": [
            SourceConfig(name="files", paths=list(args.watch), start_at=start_at)]})
    elif args.start_at:
        config = config.model_copy(update={"sources": [
            s.model_copy(update={"start_at": args.start_at}) for s in config.sources]})
    if args.input_format:
        config = config.model_copy(update={"sources": [
            s.model_copy(update={"format": args.input_format}) if s.kind == "files" else s
            for s in config.sources]})
    patterns = _load_patterns((list(config.patterns) or _builtin()) + list(config.add_patterns))
    _check_policy(args.config, config, patterns)
    return run_daemon(config)


def _check_policy(path: Path | None, config: object, patterns: PatternSet) -> None:
    """Refuse a ``[policy]`` the signatures contradict, naming the file and the field."""
    from sigwatch.app import policy_problems
    from sigwatch.config import Config, ConfigProblemsError
    from sigwatch.errors import ConfigError

    assert isinstance(config, Config)
    problems = policy_problems(config, patterns)
    if problems:
        raise ConfigProblemsError([ConfigError(str(path or "<defaults>"), field, why)
                                   for field, why in problems])
