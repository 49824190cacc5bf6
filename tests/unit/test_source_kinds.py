"""Signatures say which kinds of stream they apply to; ``applies`` is what the runtime asks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sigwatch.checks.lint import lint
from sigwatch.checks.selftest import detect_text
from sigwatch.patterns.compiled import PatternSet
from sigwatch.patterns.kinds import allowed_signatures, applies, content_of
from sigwatch.patterns.loader import load_patterns
from sigwatch.pipeline import Engine


@pytest.mark.parametrize(("kinds", "stream", "expected"), [
    ({"kernel"}, "kmsg", True),
    ({"kernel"}, "journal-kernel", True),
    ({"kernel"}, "file", False),           # a job log quoting the kernel
    ({"kernel"}, "exec", False),
    ({"kernel"}, "container", False),
    ({"kernel"}, "journal", True),         # an unfiltered journal holds both
    ({"kernel"}, "scan", True),            # `sigwatch scan dmesg.txt` must still find Xids
    ({"job"}, "kmsg", False),
    ({"job"}, "pipe", True),
    ({"any"}, "kmsg", True),
    ({"any"}, "file", True),
    ({"kernel", "job"}, "file", True),
    ({"kernel"}, "some-new-reader", True),  # unknown readers are mixed: nothing is silenced
])
def test_applies(kinds: set[str], stream: str, expected: bool) -> None:
    assert expected is applies(kinds, stream)


def test_configuration_can_say_what_a_stream_holds() -> None:
    assert "kernel" == content_of("file", "kernel")  # /var/log/kern.log tailed as a file
    assert applies({"kernel"}, content_of("file", "kernel"))
    with pytest.raises(ValueError, match="unknown content kind"):
        content_of("file", "dmesg")


SIG = """
id = "{id}"
title = "T"
severity = "warning"
{sources}
[match]
regex = 'NVRM: Xid'
[[examples]]
kind = "match"
text = "NVRM: Xid (PCI:0000:3b:00): 79, x"
[[examples]]
kind = "no_match"
text = "NVRM: loading"
"""


def test_signatures_apply_to_any_stream_by_default(
        write_pattern: Callable[[str, str], Path]) -> None:
    root = write_pattern("plain_sig", SIG.format(id="plain_sig", sources=""))

    patterns, errors = load_patterns([root])

    assert [] == errors
    assert frozenset({"any"}) == patterns.signatures[0].sources


def test_an_unknown_source_kind_is_a_load_error(
        write_pattern: Callable[[str, str], Path]) -> None:
    root = write_pattern("bad_kind", SIG.format(id="bad_kind", sources='sources = ["dmesg"]'))

    _patterns, errors = load_patterns([root])

    assert ["sources[0]"] == [e.field for e in errors]


def test_lint_rejects_any_mixed_with_a_specific_kind(
        write_pattern: Callable[[str, str], Path]) -> None:
    root = write_pattern("mixed_kind",
                         SIG.format(id="mixed_kind", sources='sources = ["any", "kernel"]'))
    patterns, errors = load_patterns([root])

    findings = lint(patterns, errors, strict=False)

    assert ["P013"] == [f.code for f in findings if f.code == "P013"]


def _only(patterns: PatternSet, stream_kind: str) -> Engine:
    allowed = allowed_signatures(patterns, stream_kind)
    return Engine(PatternSet(tuple(s for s in patterns.signatures if s.id in allowed)))


def test_kernel_signatures_detect_on_kernel_streams_and_not_on_job_logs_quoting_them(
        library: PatternSet) -> None:
    kernel_only = [s for s in library.signatures if s.sources == frozenset({"kernel"})]
    assert kernel_only, "the library marks its kernel-only signatures"
    on_kernel, on_job = _only(library, "kmsg"), _only(library, "file")

    for sig in kernel_only:
        for example in (e for e in sig.examples if e.kind == "match"):
            assert sig.id in {d.signature for d in detect_text(on_kernel, example.text)}, sig.id
            assert sig.id not in {d.signature for d in detect_text(on_job, example.text)}, sig.id
