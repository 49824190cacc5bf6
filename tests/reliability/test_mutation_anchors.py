"""``bench/mutations.py`` plants faults by text anchors; they must still point at real code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "mutations.py"


def test_every_planted_fault_still_finds_its_place_in_the_code() -> None:
    spec = importlib.util.spec_from_file_location("mutations", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)

    assert [] == module.check_anchors()
    assert len(module.MUTATIONS) >= 8
