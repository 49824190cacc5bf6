"""Coverage from the source: upstream error enumerations versus the library.

patterns/COVERAGE.md is generated from the extracted enumerations (patterns/_enums/) by running
every name, in the format it reaches logs in, through the real engine.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"sigwatch_bench_{name}",
                                                  REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


coverage = _load("coverage")


@pytest.fixture(name="results", scope="module")
def _results(library):  # noqa: ANN001, ANN202
    return coverage.evaluate(library)


def test_coverage_table_is_current(results) -> None:  # noqa: ANN001
    """patterns/COVERAGE.md is what bench/coverage.py generates from today's library."""
    assert coverage.render(results) == coverage.OUTPUT.read_text(encoding="utf-8")


def test_every_upstream_name_is_covered_or_left_out_with_a_reason(results) -> None:  # noqa: ANN001
    """No silent gap: an uncovered name must be excluded on purpose, with the reason."""
    gaps = [f"{family}: {row.name}" for family, (_data, rows) in results.items()
            for row in rows if row.status == "NOT COVERED"]

    assert [] == gaps


def test_every_covered_name_is_really_matched_by_the_engine(library) -> None:  # noqa: ANN001
    """Recomputed line by line: each covered name's rendered line raises an alarm."""
    engine = coverage.Engine(library)
    missed = []
    for family, spec in coverage.FAMILIES.items():
        data = json.loads((coverage.ENUMS / f"{family}.json").read_text(encoding="utf-8"))
        for entry in data["entries"]:
            if entry["name"] in spec.excluded:
                continue
            for line in spec.render(entry):
                if not coverage._detect(engine, line):  # noqa: SLF001
                    missed.append(line)

    assert [] == missed


def test_excluded_names_exist_upstream() -> None:
    """An exclusion for a name the enumeration no longer has is stale."""
    stale = []
    for family, spec in coverage.FAMILIES.items():
        data = json.loads((coverage.ENUMS / f"{family}.json").read_text(encoding="utf-8"))
        names = {e["name"] for e in data["entries"]}
        stale += [f"{family}: {n}" for n in spec.excluded if n not in names]

    assert [] == stale


@pytest.mark.parametrize("family", sorted(coverage.FAMILIES))
def test_enumeration_records_its_upstream_source(family: str) -> None:
    """Each data file names the repository, path and commit it was extracted from."""
    data = json.loads((coverage.ENUMS / f"{family}.json").read_text(encoding="utf-8"))

    assert data["source"].startswith("https://github.com/")
    assert len(data["commit"]) == 40
    assert len(data["entries"]) >= 5


def test_excluded_status_names_do_not_alarm(library) -> None:  # noqa: ANN001
    """Left out on purpose means quiet: polling results and success codes raise nothing."""
    engine = coverage.Engine(library)
    loud = []
    for family, spec in coverage.FAMILIES.items():
        data = json.loads((coverage.ENUMS / f"{family}.json").read_text(encoding="utf-8"))
        for entry in data["entries"]:
            if entry["name"] in spec.excluded:
                loud += [line for line in spec.render(entry) if coverage._detect(engine, line)]  # noqa: SLF001

    assert [] == loud


extract_enums = _load("extract_enums")


@pytest.mark.parametrize("family", sorted(coverage.FAMILIES))
def test_enumeration_data_file_is_well_formed(family: str) -> None:
    """Every key present, a 40-digit commit, no empty or duplicate names (extracted or recorded)."""
    assert [] == extract_enums.check(family)


def test_every_recorded_family_is_rendered_and_checked() -> None:
    """A table recorded by hand (repository too large to snapshot) still has a rendering."""
    assert set(extract_enums.RECORDED) <= set(coverage.FAMILIES)
    assert set(extract_enums.EXTRACTORS) <= set(coverage.FAMILIES)


@pytest.mark.parametrize("family", sorted(coverage.FAMILIES))
def test_source_is_a_permalink_at_the_recorded_commit(family: str) -> None:
    """The source URL pins the commit the table was read at, so the wording can be checked."""
    data = json.loads((coverage.ENUMS / f"{family}.json").read_text(encoding="utf-8"))

    assert data["source"] == f"{data['repository']}/blob/{data['commit']}/{data['path']}"
