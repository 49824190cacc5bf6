"""The one interest pass selects exactly the lines, with exactly the bits, that each detector's
patterns select when searched line by line (however the pass finds them: joined, entered by
their rarest bytes, or only outside the lines a prepass read)."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import pytest

from sigwatch.app import build_detectors
from sigwatch.clock import FakeClock
from sigwatch.detectors.base import interests_of
from sigwatch.detectors.progress import literal_interest
from sigwatch.patterns.compiled import PatternSet
from sigwatch.pipeline import Interests

REPO = Path(__file__).resolve().parents[2]


def _line_by_line(patterns: list[re.Pattern[bytes]], data: bytes,
                  skip: set[int] = frozenset(), covered: set[int] = frozenset(),
                  ) -> dict[int, list[int]]:
    """The reference: each line, each pattern (covered ones not on skipped lines)."""
    out: dict[int, list[int]] = {}
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        bits = 0
        for bit, pattern in enumerate(patterns):
            if bit in covered and start in skip:
                continue
            if pattern.search(data, start, end + 1) is not None:
                bits |= 1 << bit
        if bits:
            out[start] = [end, bits]
        start = end + 1
    return out


def _bench_lines(library: PatternSet, size: int) -> bytes:
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from corpus import lines  # noqa: PLC0415 - the bench's generator, not a package
    finally:
        sys.path.remove(str(REPO / "bench"))
    out: list[bytes] = []
    total = 0
    for line in lines(library.signatures, seed=11):
        out.append(line)
        total += len(line) + 1
        if total >= size:
            break
    return b"\n".join(out) + b"\n"


def _detector_patterns() -> list[re.Pattern[bytes]]:
    clock = FakeClock()
    found: list[re.Pattern[bytes]] = []
    for detector in build_detectors(clock=clock):
        for pattern in interests_of(detector) or (
                (detector.interest,) if detector.interest is not None else ()):
            if all(pattern.pattern != p.pattern for p in found):
                found.append(pattern)
    return found


class TestOnePass:
    def test_every_detector_pattern_on_the_bench_log(self, library: PatternSet) -> None:
        """The shipped detectors' patterns (error words, platform words, end-of-training
        gate, progress words) over the bench's training log: the same lines and bits."""
        patterns = _detector_patterns()
        data = _bench_lines(library, 600_000)

        got = Interests(patterns).scan(data)

        assert _line_by_line(patterns, data) == got
        assert len(got) > 1000

    def test_case_variants_and_words_cut_anywhere(self) -> None:
        """Literals in every case, and cut at every place (a rotated literal is found by
        its tail: a tail alone must select nothing)."""
        words = [b"error", b"segmentation fault", b"out of memory", b"MI300", b"exit code"]
        patterns = [re.compile(literal_interest(words)), re.compile(rb"gfx94[012]|ROCm")]
        rng = random.Random(3)
        rows: list[bytes] = []
        for _ in range(3000):
            word = rng.choice([*words, b"gfx942", b"gfx943", b"ROCm", b"rocm"])
            cut = rng.randrange(len(word) + 1)
            piece = rng.choice([word, word[cut:], word[:cut], word.upper(), word.title()])
            rows.append(b"x " * rng.randrange(3) + piece + b" y" * rng.randrange(3))
        data = b"\n".join(rows) + b"\n"

        assert _line_by_line(patterns, data) == Interests(patterns).scan(data)

    @pytest.mark.parametrize("seed", [1, 2])
    def test_covered_patterns_skip_exactly_the_lines_read_by_a_prepass(
            self, library: PatternSet, seed: int) -> None:
        """A covered pattern is not searched on the skipped lines; the others are."""
        patterns = _detector_patterns()
        data = _bench_lines(library, 200_000)
        rng = random.Random(seed)
        lines: list[tuple[int, int]] = []
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            if rng.random() < 0.6:
                lines.append((start, end))
            start = end + 1
        covered = [patterns[-1]]  # the last one (progress words, say) is a prepass's

        got = Interests(patterns, covered).scan(data, lines)

        assert _line_by_line(patterns, data, {s for s, _e in lines},
                             {len(patterns) - 1}) == got


class TestVocabulary:
    def test_a_pattern_outside_the_prepass_vocabulary_never_matches_a_line_it_reads(
            self, library: PatternSet) -> None:
        """The shipped detectors' patterns that the progress prepass's words exclude (error
        words, platform words, the end-of-training gate) find nothing on the lines it reads,
        so leaving those lines out of their search changes nothing."""
        from sigwatch.detectors.progress import BULK_BYTES, BULK_WORDS, BulkProgress  # noqa: PLC0415
        from sigwatch.pipeline import _outside  # noqa: PLC0415

        data = _bench_lines(library, 1_500_000)
        lines = BulkProgress().parse(data).lines
        outside = [p for p in _detector_patterns()
                   if _outside(p, set(BULK_WORDS), set(BULK_BYTES))]

        assert len(outside) >= 3
        assert len(lines) > 3000
        for pattern in outside:
            assert [] == [data[s:e] for s, e in lines if pattern.search(data, s, e + 1)]

    def test_a_word_of_the_vocabulary_keeps_a_pattern_inside(self) -> None:
        """'loss scale' and 'iteration' can be on a Megatron line: searched everywhere."""
        from sigwatch.detectors.progress import BULK_WORDS  # noqa: PLC0415
        from sigwatch.pipeline import _outside  # noqa: PLC0415

        words = set(BULK_WORDS)

        assert not _outside(re.compile(literal_interest([b"loss scale"])), words)
        assert not _outside(re.compile(rb"iteration|xyzzy"), words)
        assert _outside(re.compile(literal_interest([b"error", b"out of memory"])), words)
