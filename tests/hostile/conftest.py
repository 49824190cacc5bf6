"""Fixtures of the hostile suite (the rig itself is ``support.hostile``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.daemon import wait_for
from support.hostile import Rig


@pytest.fixture(name="rig")
def _rig(tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(tmp_path)
    yield rig
    for run in rig.running:
        run.stop(timeout=3.0)
        run.d._log.close()  # noqa: SLF001


@pytest.fixture(name="wait")
def _wait() -> Callable[..., object]:
    return wait_for
