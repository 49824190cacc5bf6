"""Every embedded example of every signature, run through the real engine (one test each)."""

from __future__ import annotations

import pytest

from sigwatch.checks.selftest import run_example
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
from sigwatch.pipeline import Engine

_PATTERNS, _ERRORS = load_patterns([builtin_pattern_dir()])
_ENGINE = Engine(_PATTERNS)
_CASES = [(sig, i) for sig in _PATTERNS.signatures for i in range(len(sig.examples))]


def test_library_loads_without_errors() -> None:
    """The shipped library is valid as a whole."""
    assert [] == [str(e) for e in _ERRORS]


@pytest.mark.parametrize(
    ("sig", "index"), _CASES,
    ids=[f"{sig.id}[example-{i}-{sig.examples[i].kind}]" for sig, i in _CASES])
def test_example(sig, index: int) -> None:
    """A match example yields this signature; a no_match example does not."""
    result = run_example(_ENGINE, sig, index)

    assert result.passed, result.describe()
