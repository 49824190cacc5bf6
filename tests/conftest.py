"""Shared fixtures: fresh registries, fake clocks, tiny pattern folders, the built-in library."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sigwatch.clock import FakeClock
from sigwatch.patterns.compiled import PatternSet
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "corpus"


@pytest.fixture(name="registry")
def _registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture(name="fake_clock")
def _fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(name="write_pattern")
def _write_pattern(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write one signature file (TOML text) under tmp/patterns/<area>/<name>.toml."""
    root = tmp_path / "patterns"

    def write(name: str, text: str, area: str = "test") -> Path:
        path = root / area / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return root

    return write


@pytest.fixture(name="library", scope="session")
def _library() -> PatternSet:
    patterns, errors = load_patterns([builtin_pattern_dir()])
    assert [] == [str(e) for e in errors]
    return patterns
