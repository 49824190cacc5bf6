"""The real corpus: verbatim public excerpts the library must catch, and healthy ones it must not.

The same evaluation as ``./dev.sh recall`` (bench/recall.py), built once per session.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_recall() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sigwatch_bench_recall", REPO / "bench" / "recall.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


recall = _load_recall()
EXCERPTS = recall.load_corpus()
QUIET = [e for e in EXCERPTS if e.expect == "quiet"]
EXPECTED = tomllib.loads(recall.EXPECTED.read_text(encoding="utf-8"))


@pytest.fixture(name="report", scope="module")
def _report(library):  # noqa: ANN001, ANN202 - fixture types come from conftest
    return recall.evaluate(recall.build_engine(library), EXCERPTS)


class TestCorpusShape:
    def test_corpus_is_as_large_and_wide_as_the_issue_asks(self) -> None:
        """At least 150 excerpts: 100 failures over 25 classes and 40 healthy logs."""
        failures = [e for e in EXCERPTS if e.expect == "alarm"]
        classes = {e.cls for e in failures}

        assert len(EXCERPTS) >= 150
        assert len(failures) >= 100
        assert len(classes) >= 25
        assert len(QUIET) >= 40

    def test_recorded_corpus_size_is_current(self) -> None:
        """EXPECTED.toml (which docs/signatures.md cites) records the corpus as it is."""
        assert (EXPECTED["excerpts"], EXPECTED["failures"], EXPECTED["healthy"]) == (
            len(EXCERPTS), len(EXCERPTS) - len(QUIET), len(QUIET))

    def test_docs_record_the_corpus_size_and_floor(self) -> None:
        """docs/signatures.md states the size and the recall floor the test command enforces."""
        readme = (REPO / "docs" / "signatures.md").read_text(encoding="utf-8")

        assert f"{EXPECTED['excerpts']} excerpts" in readme
        assert "tests/corpus/real/EXPECTED.toml" in readme

    def test_every_excerpt_names_a_public_source(self) -> None:
        """Verbatim excerpts only: each file carries the page it was copied from."""
        assert all(e.url.startswith(("https://", "http://")) for e in EXCERPTS)

    def test_malformed_excerpt_file_is_rejected(self, tmp_path: Path) -> None:
        """A file without an expected outcome cannot silently count as a pass."""
        bad = tmp_path / "cuda" / "x.toml"
        bad.parent.mkdir()
        bad.write_text("url = 'https://example.org/1'\nkind = 'issue'\nclass = 'c'\n"
                       "text = '''boom'''\n", encoding="utf-8")

        with pytest.raises(ValueError, match="expect"):
            recall.load_corpus(tmp_path)

    def test_stamp_records_the_blind_outcome_once_and_never_again(self, tmp_path: Path,
                                                                    library) -> None:  # noqa: ANN001
        """at_collection is written before patterns change for an excerpt; re-stamping is refused."""
        new = tmp_path / "cuda" / "new.toml"
        new.parent.mkdir()
        new.write_text("url = 'https://example.org/1'\nkind = 'forum'\nclass = 'c'\n"
                       "expect = 'alarm'\ntext = \'\'\'\nall is fine here\n\'\'\'\n",
                       encoding="utf-8")
        engine = recall.build_engine(library)

        recall.stamp(engine, [new])

        assert recall.load_corpus(tmp_path)[0].at_collection == "missed"
        with pytest.raises(SystemExit, match="already recorded"):
            recall.stamp(engine, [new])


    def test_stamp_records_the_batch_and_the_library_commit(self, tmp_path: Path,
                                                            library) -> None:  # noqa: ANN001
        """A stamped excerpt says which batch it came in and which library judged it."""
        new = tmp_path / "ascend" / "new.toml"
        new.parent.mkdir()
        new.write_text("url = 'https://example.org/2'\nkind = 'blog'\nlang = 'zh'\n"
                       "class = 'c'\nexpect = 'quiet'\ntext = \'\'\'\n训练正常\n\'\'\'\n",
                       encoding="utf-8")

        recall.stamp(recall.build_engine(library), [new], "b7-x", "abc123")

        [excerpt] = recall.load_corpus(tmp_path)
        assert ("caught", "b7-x", "abc123", "zh") == (
            excerpt.at_collection, excerpt.batch, excerpt.stamped_against, excerpt.lang)

    def test_blind_figures_by_batch_kind_language_and_the_newest_failures(
            self, tmp_path: Path) -> None:
        """Batches sort in collection order; 'last N' takes the newest blind failures."""
        def excerpt(name: str, batch: str, outcome: str, kind: str = "issue",
                    lang: str = "en", expect: str = "alarm") -> recall.Excerpt:
            return recall.Excerpt(tmp_path / f"{name}.toml", "https://e.org", kind, "c", expect,
                                  (), "t", outcome, lang, batch, "")
        old = [excerpt(f"o{i}", "", "missed") for i in range(recall.LAST_N)]
        new = [excerpt(f"n{i:03}", "b2", "caught", kind="blog", lang="zh")
               for i in range(recall.LAST_N)]
        quiet = [excerpt("q", "b2", "caught", expect="quiet")]
        unstamped = [excerpt("u", "", "")]

        figures = recall.blind_figures(old + new + quiet + unstamped)

        assert (2 * recall.LAST_N, recall.LAST_N) == (figures["all batches"].failures,
                                                      figures["all batches"].caught)
        assert 1.0 == figures[f"last {recall.LAST_N} failures"].recall
        assert 0.0 == figures["batch (before batches)"].recall
        assert (1, 1) == (figures["batch b2"].healthy, figures["batch b2"].quiet)
        assert recall.LAST_N == figures["lang zh"].caught
        assert recall.LAST_N == figures["kind blog"].failures

    def test_batches_sort_by_their_numbers(self, tmp_path: Path) -> None:
        """b10 is collected after b9 (a plain string sort would put it after b1): its
        failures are the newest."""
        def excerpt(name: str, batch: str, outcome: str) -> recall.Excerpt:
            return recall.Excerpt(tmp_path / f"{name}.toml", "https://e.org", "issue", "c",
                                  "alarm", (), "t", outcome, "en", batch, "")
        b9 = [excerpt(f"a{i:03}", "b9-2026-11-27", "missed") for i in range(recall.LAST_N)]
        b10 = [excerpt(f"z{i:03}", "b10-2026-11-27", "caught") for i in range(recall.LAST_N)]
        b2 = [excerpt(f"m{i:03}", "b2-2026-11-26", "missed") for i in range(3)]

        figures = recall.blind_figures(b10 + b2 + b9)

        assert 1.0 == figures[f"last {recall.LAST_N} failures"].recall
        assert ["batch b2-2026-11-26", "batch b9-2026-11-27", "batch b10-2026-11-27"] == [
            k for k in figures if k.startswith("batch ")]

    def test_lang_outside_the_known_set_is_an_error_naming_the_file(
            self, tmp_path: Path) -> None:
        bad = tmp_path / "x" / "bad.toml"
        bad.parent.mkdir()
        bad.write_text("url = 'https://e.org'\nkind = 'issue'\nlang = 'chinese'\n"
                       "class = 'c'\nexpect = 'alarm'\ntext = 'boom'\n", encoding="utf-8")

        with pytest.raises(ValueError, match=r"bad\.toml: lang must be one of"):
            recall.load_corpus(tmp_path)

class TestRecall:
    def test_overall_recall_meets_the_recorded_floor(self, report) -> None:  # noqa: ANN001
        """Caught failures / failure excerpts is at least EXPECTED.toml's figure."""
        missed = [o.excerpt.name for o in report.outcomes
                  if o.excerpt.expect == "alarm" and not o.ok]

        assert report.recall >= EXPECTED["recall"], missed

    def test_every_class_meets_the_recorded_floor(self, report) -> None:  # noqa: ANN001
        """No failure class is left behind by a good overall figure."""
        open_misses = frozenset(recall.load_open())
        low = {cls: (caught, n)
               for cls, (n, caught, _h, _f) in report.per_class(open_misses).items()
               if n and caught / n < EXPECTED["class_recall"]}

        assert {} == low

    def test_the_open_misses_are_excerpts_still_missed(self, report) -> None:  # noqa: ANN001
        """EXPECTED.toml's ``[open]`` names blind misses not caught yet (and open false alarms), each with its reason:
        each must exist and still be missed, so the list never hides a fixed or renamed one."""
        outcomes = {o.excerpt.name: o for o in report.outcomes}
        open_misses = recall.load_open()

        assert [] == [name for name in open_misses if name not in outcomes]
        assert [] == [name for name in open_misses if outcomes[name].ok]


_OPEN = recall.load_open()


@pytest.mark.parametrize("excerpt", [
    pytest.param(e, marks=pytest.mark.xfail(strict=True, reason=_OPEN[e.name]))
    if e.name in _OPEN else e for e in QUIET], ids=lambda e: e.name)
def test_healthy_excerpt_raises_no_alarm(library, excerpt) -> None:  # noqa: ANN001
    """Benign and benign-but-scary logs make no detection at warning or above."""
    engine = _shared_engine(library)

    found = recall.detect(engine, excerpt.text, excerpt.name)

    assert [] == [f"{d.signature}: {d.text[:100]}" for d in found
                  if d.severity >= recall.ALARM_FLOOR]


_ENGINES: dict[int, object] = {}


def _shared_engine(library):  # noqa: ANN001, ANN202
    key = id(library)
    if key not in _ENGINES:
        _ENGINES[key] = recall.build_engine(library)
    return _ENGINES[key]
