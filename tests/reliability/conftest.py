"""Fixtures for the reliability suite: a harness around the real runtime."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from harness import Harness


@pytest.fixture(name="make_harness")
def _make_harness(tmp_path: Path) -> Callable[..., Harness]:
    """Build a ``Harness`` in tmp (call it again for a second, independent one)."""
    made: list[Harness] = []

    def make(*globs: str, **kw: object) -> Harness:
        h = Harness(tmp_path / f"h{len(made)}", globs or ("*.log",), **kw)  # type: ignore[arg-type]
        made.append(h)
        return h

    yield make
    for h in made:
        if h.service is not None:
            h.crash()
