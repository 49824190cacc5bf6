"""Find, parse, validate and compile signature files. Reports every error, never just the first."""

from __future__ import annotations

import re as std_re
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

import regex
from pydantic import ValidationError

from sigwatch.errors import PatternError, field_path
from sigwatch.model import Remediation, Severity
from sigwatch.patterns.compiled import (
    CompiledSignature,
    CompiledStep,
    Example,
    PatternSet,
    derive_keywords,
)
from sigwatch.patterns.schema import MatchSpec, SignatureFile, StepSpec

__all__ = ["builtin_pattern_dir", "compile_signature", "find_pattern_files", "load_patterns"]

SKIPPED_DIRS = frozenset({"deprecated", "samples"})


DEFAULT_CONTEXT_BEFORE = 5
"""Lines quoted before the trigger when a signature does not say (``[context] before``)."""

def builtin_pattern_dir() -> Path:
    """The signature library shipped with sigwatch (inside the wheel, or the source tree)."""
    here = Path(__file__).resolve().parent.parent
    shipped = here / "_patterns"
    if shipped.is_dir():
        return shipped
    return here.parent.parent / "patterns"


def find_pattern_files(dirs: Iterable[Path]) -> list[Path]:
    """Every ``*.toml`` signature file below the given folders (or the files themselves)."""
    found: list[Path] = []
    for root in dirs:
        if root.is_file():
            found.append(root)
            continue
        for path in sorted(root.rglob("*.toml")):
            rel = path.relative_to(root).parts
            if any(part in SKIPPED_DIRS or part.startswith((".", "_")) for part in rel[:-1]):
                continue
            found.append(path)
    return found


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _compile_regex(text: str, file: str, field: str) -> regex.Pattern[str]:
    try:
        return regex.compile(text, regex.VERSION0)
    except regex.error as exc:
        pos = f" at position {exc.pos}" if exc.pos is not None else ""
        raise PatternError(file, field, f"{exc.msg}{pos}") from None


def _compile_step(spec: StepSpec | MatchSpec, file: str, field: str) -> CompiledStep:
    regex_text = spec.regex
    keywords = spec.keywords
    within = spec.within_lines if isinstance(spec, StepSpec) else 0
    pattern = _compile_regex(regex_text, file, f"{field}.regex")
    pref = spec.prefregex
    if pref is not None:
        try:
            std_re.compile(pref.encode("utf-8"))
        except std_re.error as exc:
            pos = f" at position {exc.pos}" if exc.pos is not None else ""
            raise PatternError(file, f"{field}.prefregex", f"{exc.msg}{pos}") from None
    if keywords is not None:
        bad = [k for k in keywords if not k]
        if bad:
            raise PatternError(file, f"{field}.keywords", "keywords must not be empty strings")
        return CompiledStep(pattern, regex_text, tuple(keywords), within, keywords_derived=False,
                            prefregex=pref)
    return CompiledStep(pattern, regex_text, derive_keywords(regex_text), within,
                        keywords_derived=True, prefregex=pref)


def compile_signature(raw: SignatureFile, path: Path) -> CompiledSignature:
    """Compile one validated signature file; raises PatternError naming the field."""
    file = _display(path)
    steps = [_compile_step(raw.match, file, "match")]
    steps += [_compile_step(s, file, f"match.then[{i}]") for i, s in enumerate(raw.match.then)]
    include = tuple(
        _compile_regex(text, file, f"context.include[{i}]")
        for i, text in enumerate(raw.context.include))
    rem = raw.remediation
    return CompiledSignature(
        id=raw.id,
        title=raw.title,
        severity=Severity.parse(raw.severity),
        status=raw.status,
        description=raw.description,
        steps=tuple(steps),
        context_before=(DEFAULT_CONTEXT_BEFORE if raw.context.before is None
                        else raw.context.before),
        context_include=include,
        remediation=Remediation(rem.summary, tuple(rem.steps), rem.runbook, rem.action or ""),
        labels=tuple(sorted(raw.labels.items())),
        supersedes=frozenset(raw.supersedes),
        once_per_stream=raw.once_per_stream,
        caused_by=tuple(raw.collateral.caused_by) if raw.collateral else (),
        collateral_window=raw.collateral.within_seconds if raw.collateral else 0.0,
        collateral_severity=(Severity.parse(raw.collateral.severity)
                             if raw.collateral and raw.collateral.severity else None),
        incidents=tuple(raw.incidents),
        references=tuple(raw.references),
        falsepositives=tuple(raw.falsepositives),
        examples=tuple(Example(e.kind, e.text, e.note) for e in raw.examples),
        known_false_positives=tuple((k.text, k.reason) for k in raw.known_false_positives),
        path=path,
        raw=raw,
        sources=frozenset(raw.sources),
        owner=raw.owner or "unknown",
        event_lines=raw.match.event_lines,
        event_end=(_compile_regex(raw.match.event_end, file, "match.event_end")
                   if raw.match.event_end else None),
        policy=_policy_keys(raw),
    )


def _policy_keys(raw: SignatureFile) -> tuple[tuple[str, object], ...]:
    """The keys the file's ``[policy]`` table sets (lists become tuples: the value is frozen)."""
    if raw.policy is None:
        return ()
    given = raw.policy.model_dump(exclude_unset=True)
    return tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(given.items()))


def _load_file(path: Path) -> tuple[CompiledSignature | None, list[PatternError]]:
    file = _display(path)
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, [PatternError(file, "", f"not UTF-8 text: {exc.reason} at byte {exc.start}")]
    except tomllib.TOMLDecodeError as exc:
        return None, [PatternError(file, "", f"invalid TOML: {exc}")]
    except OSError as exc:
        return None, [PatternError(file, "", f"cannot read: {exc.strerror}")]
    try:
        raw = SignatureFile.model_validate(data)
    except ValidationError as exc:
        errors = []
        for err in exc.errors():
            reason = err["msg"]
            if err["type"] == "extra_forbidden":
                reason = "unknown key"
            errors.append(PatternError(file, field_path(err["loc"]), reason))
        return None, errors
    try:
        return compile_signature(raw, path), []
    except PatternError as exc:
        return None, [exc]


def load_patterns(dirs: Sequence[Path]) -> tuple[PatternSet, list[PatternError]]:
    """Load every signature below ``dirs``.

    Returns the signatures that loaded and the full list of errors. A caller that needs an
    all-or-nothing set (start-up, reload) treats any error as failure.
    """
    errors: list[PatternError] = []
    for root in dirs:
        if not root.exists():
            errors.append(PatternError(str(root), "", "no such file or directory"))
    loaded: list[CompiledSignature] = []
    seen: dict[str, Path] = {}
    for path in find_pattern_files(d for d in dirs if d.exists()):
        sig, errs = _load_file(path)
        errors.extend(errs)
        if sig is None:
            continue
        if sig.id in seen:
            also = _display(seen[sig.id])
            errors.append(PatternError(
                _display(path), "id", f"duplicate id {sig.id!r} (also in {also})"))
            continue
        seen[sig.id] = path
        loaded.append(sig)
    ids = set(seen)
    for sig in loaded:
        file = _display(sig.path)
        for i, other in enumerate(sorted(sig.supersedes)):
            if other not in ids:
                errors.append(PatternError(file, f"supersedes[{i}]",
                                           f"unknown signature {other!r}"))
        for i, other in enumerate(sig.caused_by):
            if other not in ids:
                errors.append(PatternError(
                    file, f"collateral.caused_by[{i}]", f"unknown signature {other!r}"))
    loaded.sort(key=lambda s: s.id)
    return PatternSet(tuple(loaded), tuple(dirs)), errors
