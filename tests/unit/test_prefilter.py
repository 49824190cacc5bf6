"""The prefilter's analysis of a regex and its candidate lines (no timings here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import regex

from sigwatch.engine.analysis import CASE_VARIANTS, analyze
from sigwatch.engine.prefilter import Prefilter, hyperscan_available
from sigwatch.framing.normalize import normalize
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns

REPO = Path(__file__).resolve().parent.parent.parent
GOODLOGS = REPO / "tests" / "corpus" / "goodlogs"
BACKENDS = ["python"] + (["hyperscan"] if hyperscan_available() else [])


@pytest.fixture(scope="module", name="library")
def _library():
    patterns, errors = load_patterns([builtin_pattern_dir()])
    assert [] == errors
    return patterns


class TestAnalysis:
    def test_case_variants_are_every_non_ascii_letter_regex_folds_to_ascii(self) -> None:
        """(?i) in ``regex`` matches KELVIN SIGN for k, LONG S for s, DOTTED I for i: no more."""
        text = "".join(chr(c) for c in range(128, 0x30000) if not 0xD800 <= c < 0xE000)
        found: dict[str, set[str]] = {}
        for letter in "abcdefghijklmnopqrstuvwxyz":
            hits = regex.findall(f"(?i){letter}", text, flags=regex.VERSION0)
            if hits:
                found[letter] = set(hits)
        assert {k: {v.decode()} for k, v in CASE_VARIANTS.items()} == found

    def test_the_anchor_is_the_rarest_required_literal(self) -> None:
        f = analyze(r"NVRM: Xid \((?:PCI:)?[0-9a-fA-F:.]{4,20}\): 79,")
        assert (("NVRM: Xid (", False),) == f.anchor
        assert not f.weak

    def test_a_caseless_pattern_gets_a_caseless_anchor(self) -> None:
        f = analyze(r"(?i)(?<![a-z])loss\s{0,3}[:=]\s{0,3}[-+]?nan\b")
        assert f.anchor in ((("nan", True),), (("loss", True),))
        assert f.relaxed is not None

    def test_alternatives_give_one_factor_with_every_branch(self) -> None:
        f = analyze(r"CUDA out of memory\. Tried|CUDA error: out of memory")
        assert 2 == len(f.anchor)

    def test_variable_width_lookbehind_is_dropped_not_refused(self) -> None:
        f = analyze(r"\bCUDNN_X\b(?<!Profiling failure[^\n]{0,120}CUDNN_X)")
        assert f.relaxed is not None
        assert re.search(f.relaxed, b"Profiling failure: CUDNN_X")  # a superset

    @pytest.mark.parametrize("pattern", [
        r"\p{Lu}+_FATAL", r"[[:digit:]]+ errors", r"(?:foo){e<=1}", r"(a)\1", r"(?x) a b",
        r"(?|(a)|(b))", r"x{e}",
    ])
    def test_syntax_the_stdlib_parser_reads_otherwise_is_not_analysed(self, pattern: str) -> None:
        assert analyze(pattern).relaxed is None

    def test_relaxed_regex_never_crosses_a_newline(self) -> None:
        f = analyze(r"alpha[^|]{0,50}omega")
        assert f.relaxed is not None
        assert re.search(f.relaxed, b"alpha x omega")
        assert not re.search(f.relaxed, b"alpha x\nomega")

    def test_multibyte_characters_count_as_one_in_bounded_repeats(self) -> None:
        f = analyze(r"job \[[^|\]]{3,3}\] aborted")
        assert f.relaxed is not None
        assert re.search(f.relaxed, "job [日本語] aborted".encode())

    def test_every_library_example_passes_its_relaxed_regex(self, library) -> None:
        """On the raw bytes of each visible part, exactly what the prefilter checks."""
        for sig in library.signatures:
            for ex in sig.examples:
                if ex.kind != "match":
                    continue
                for raw in ex.text.split("\n"):
                    for _rank, text in normalize(raw):
                        for step in sig.steps:
                            if step.pattern.search(text) is None:
                                continue
                            f = analyze(step.source)
                            assert f.relaxed is not None, sig.id
                            assert re.search(f.relaxed, text.encode()), (sig.id, text)


class TestPrefilter:
    def test_every_library_step_is_prefiltered(self, library) -> None:
        for backend in BACKENDS:
            assert () == Prefilter(library, backend).forced

    def test_none_backend_forces_every_step(self, library) -> None:
        pf = Prefilter(library, "none")
        assert not pf.filters_everything
        assert len(pf.forced) == sum(len(s.steps) for s in library.signatures)

    def test_unknown_backend_is_refused(self, library) -> None:
        with pytest.raises(ValueError, match="backend"):
            Prefilter(library, "turbo")

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_benign_logs_yield_few_candidates(self, library, backend: str) -> None:
        """Healthy logs full of near misses: only a small share of lines reaches Python."""
        pf = Prefilter(library, backend)
        lines = candidates = 0
        for path in sorted(GOODLOGS.glob("*.log")):
            data = path.read_bytes()
            if not data.endswith(b"\n"):
                data += b"\n"
            lines += data.count(b"\n")
            candidates += len(pf.candidates(data))
        assert candidates < lines / 50

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_candidates_name_the_line_and_the_steps(self, library, backend: str) -> None:
        pf = Prefilter(library, backend)
        data = (b"step 1 loss 2.0\n"
                b"[rank1]: RuntimeError: CUDA error: out of memory\n"
                b"step 2 \x1b[1mloss\x1b[0m: nan\n"
                b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
        got = pf.candidates(data)
        starts = [s for s, _e, _steps in got]
        lines = data.split(b"\n")
        offsets = [sum(len(x) + 1 for x in lines[:k]) for k in range(4)]
        assert offsets[1:] == starts
        ids = [{library.signatures[i].id for i, _k in steps} for _s, _e, steps in got]
        assert "cuda_out_of_memory" in ids[0]
        assert "training_loss_nan" in ids[1]  # found through the ANSI codes
        assert "nvidia_xid_79_fallen_off_bus" in ids[2]
