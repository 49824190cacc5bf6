"""``sigwatch patterns lint``: library policy over signature files. Reports every finding.

Codes are stable so they can be referred to: P001 schema, P002 identity, P003 regex, P004
examples cover every step, P005 keywords honest, P006 catastrophic backtracking, P007 anchoring,
P008 wording, P009 references, P010 labels, P011 remediation, P012 examples pass, P013 source
kinds, P015 owner, P016 policy (a user-owned signature never drains; recovery signatures
exist), P017 cost (a regex the prefilter can only gate on a common literal).
"""

from __future__ import annotations

import re as std_re
import time
from dataclasses import dataclass
from pathlib import Path

import regex

from sigwatch.checks.selftest import run_examples
from sigwatch.engine.analysis import analyze, backtrack_risk
from sigwatch.errors import PatternError
from sigwatch.framing.normalize import normalize
from sigwatch.patterns.compiled import CompiledSignature, PatternSet
from sigwatch.pipeline import Engine

__all__ = ["Finding", "lint"]

ALLOWED_LABELS = frozenset({"area", "vendor", "component"})
PROBE_TIMEOUT = 0.25
LEADING_WILDCARD = regex.compile(r"^(?:\(\?[a-zA-Z]+\))?\.[*+]")


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: ``level`` is ``error`` (fails lint) or ``warning``."""

    code: str
    level: str
    file: str
    field: str
    message: str

    def render(self) -> str:
        field = f" {self.field}:" if self.field else ""
        return f"{self.file}:{field} {self.message} [{self.code}]"


def _example_lines(sig: CompiledSignature) -> list[str]:
    lines: list[str] = []
    for ex in sig.examples:
        if ex.kind != "match":
            continue
        for raw in ex.text.splitlines():
            lines.extend(text for _rank, text in normalize(raw))
    return lines


def _common_gate(source: str) -> str | None:
    """The common literals a step is gated on when no literal leads its relaxed regex (the
    prefilter's slow path: the relaxed regex tried at every byte of each line holding one),
    or None."""
    found = analyze(source)
    if not found.weak or not found.anchor or found.relaxed_lower is None or found.led_by_literal:
        return None
    return ", ".join(repr(text) for text, _caseless in found.anchor)


def _stress_inputs(lines: list[str]) -> list[str]:
    """Near misses that make backtracking regexes explode.

    Besides long runs of common characters, each distinct character of each example line is
    pumped where it first occurs and followed by a character that breaks the match: the shape
    that turns `(a|a)*$` or `(\\w+\\s?)*:` into exponential work.
    """
    inputs = ["a" * 65536, " " * 65536, "0" * 65536, "\t:" * 20000]
    for line in lines[:4]:
        if not line:
            continue
        inputs += [line * 40, line + "x" * 30000]
        for char in list(dict.fromkeys(line))[:32]:
            pos = line.index(char)
            inputs.append(line[:pos] + char * 3000 + "\x00!")
    return inputs


def _probe(pattern: regex.Pattern[str], inputs: list[str]) -> float | None:
    """Worst time over the stress inputs, or None when a call hit the timeout."""
    worst = 0.0
    for text in inputs:
        started = time.perf_counter()
        try:
            pattern.search(text, timeout=PROBE_TIMEOUT)
        except TimeoutError:
            return None
        worst = max(worst, time.perf_counter() - started)
    return worst


def _lint_signature(sig: CompiledSignature, strict: bool) -> list[Finding]:
    f = str(sig.path)
    out: list[Finding] = []

    def add(code: str, field: str, message: str, level: str = "error") -> None:
        out.append(Finding(code, level, f, field, message))

    if sig.path.stem != sig.id:
        add("P002", "id", f"id {sig.id!r} must equal the file name {sig.path.stem!r}")
    matches = [e for e in sig.examples if e.kind == "match"]
    no_matches = [e for e in sig.examples if e.kind == "no_match"]
    want_matches = 2 if strict else 1
    if len(matches) < want_matches:
        add("P004", "examples", f"needs at least {want_matches} match examples, has {len(matches)}")
    if not no_matches:
        add("P004", "examples", "needs at least one no_match example (a near miss)")
    lines = _example_lines(sig)
    for index, step in enumerate(sig.steps):
        field = "match" if index == 0 else f"match.then[{index - 1}]"
        hit = [t for t in lines if step.pattern.search(t, timeout=PROBE_TIMEOUT)]
        if not hit:
            add("P004", f"{field}.regex", "no match example exercises this regex")
        if step.keywords:
            for text in hit:
                if not any(k in text for k in step.keywords):
                    add("P005", f"{field}.keywords",
                        f"example line matches the regex but holds no keyword: {text[:80]!r}")
        elif strict:
            add("P005", f"{field}.keywords",
                "no keyword could be derived; give [match] keywords so the prefilter works",
                level="warning")
        if step.prefregex:
            gate = std_re.compile(step.prefregex.encode("utf-8"))
            for text in hit:
                if not gate.search(text.encode("utf-8")):
                    add("P014", f"{field}.prefregex",
                        f"example line matches the regex but not the prefregex (the "
                        f"prefilter would skip it): {text[:80]!r}")
        gated_on = _common_gate(step.source) if not step.prefregex else None
        if gated_on:
            add("P017", f"{field}.regex",
                f"no literal leads the regex and its required literals are common in training "
                f"logs ({gated_on}): the prefilter runs it on every line holding one. Lead "
                f"every branch with one literal, or give a prefregex (patterns/AUTHORING.md, "
                f"'Keep the regex cheap to find')", level="warning")
        if backtrack_risk(step.source):
            add("P006", f"{field}.regex",
                "could backtrack catastrophically: a repeated group holds another repeat or "
                "an alternation (it cannot be prefiltered and runs on every line)")
        elif _probe(step.pattern, _stress_inputs(lines)) is None:
            add("P006", f"{field}.regex",
                f"catastrophic backtracking: a stress input ran past {PROBE_TIMEOUT}s")
        if LEADING_WILDCARD.search(step.source):
            add("P007", f"{field}.regex", "leading .* or .+ is slow and matches user text",
                level="warning")
    if strict:
        if not sig.description.startswith("Detects"):
            add("P008", "description", 'must start with "Detects"')
        if not sig.falsepositives:
            add("P008", "falsepositives", 'must not be empty ("Unlikely" is allowed)')
        if not sig.references:
            add("P009", "references", "needs at least one public source for the wording")
        for i, ref in enumerate(sig.references):
            if not ref.startswith("https://"):
                add("P009", f"references[{i}]", "must be an https URL")
        if not sig.remediation.action:
            add("P011", "remediation.action", "every signature needs an action class")
    for key in dict(sig.labels):
        if key not in ALLOWED_LABELS:
            add("P010", f"labels.{key}", f"label key not allowed (allowed: "
                f"{', '.join(sorted(ALLOWED_LABELS))})")
    kinds = list(sig.raw.sources) if hasattr(sig.raw, "sources") else ["any"]
    if "any" in kinds and len(kinds) > 1:
        add("P013", "sources", '"any" already covers every kind: list it alone')
    if len(set(kinds)) != len(kinds):
        add("P013", "sources", "a kind is listed twice")
    if sig.severity.label in ("error", "critical") and not sig.remediation.summary:
        add("P011", "remediation.summary", "error and critical signatures must carry the fix")
    if sig.severity.label in ("error", "critical") and getattr(sig.raw, "owner", None) is None:
        add("P015", "owner", "error and critical signatures must say whose fault it is: "
            "user, node, fabric or unknown (a node-owned fault may drain the node)")
    policy = dict(sig.policy)
    if policy.get("action") == "drain" and sig.owner == "user":
        add("P016", "policy.action", "a user-owned signature never drains a node")
    if policy.get("count", 1) > 1 and "window_seconds" not in policy:
        add("P016", "policy.count", "a count above 1 needs window_seconds: the count is "
            "within that window")
    if policy.get("recovered_by") and sig.id in policy["recovered_by"]:
        add("P016", "policy.recovered_by", "a signature cannot be its own recovery line")
    return out


def _lint_recovery(patterns: PatternSet) -> list[Finding]:
    """P016: every signature named in ``[policy] recovered_by`` is loaded."""
    out = []
    for sig in patterns.signatures:
        for rec in dict(sig.policy).get("recovered_by", ()):
            if patterns.get(rec) is None:
                out.append(Finding("P016", "error", str(sig.path),
                                   "policy.recovered_by", f"no signature has the id {rec!r}"))
    return out


def lint(patterns: PatternSet, load_errors: list[PatternError], *,
         strict: bool = True) -> list[Finding]:
    """Every finding over a loaded set (``strict`` applies the built-in library's rules)."""
    findings = [Finding("P001" if "regex" not in e.field else "P003", "error",
                        e.file, e.field, e.reason) for e in load_errors]
    for sig in patterns.signatures:
        findings.extend(_lint_signature(sig, strict))
    findings.extend(_lint_recovery(patterns))
    for result in run_examples(patterns, Engine(patterns)):
        if not result.passed:
            findings.append(Finding("P012", "error", result.file,
                                    f"examples[{result.index}]", result.describe()))
    return findings


def default_library_root(patterns: PatternSet) -> Path | None:
    """The first folder the set was loaded from, for messages."""
    return patterns.sources[0] if patterns.sources else None
