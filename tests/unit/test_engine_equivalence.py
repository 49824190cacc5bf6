"""The fast path finds exactly what running every regex on every line finds.

A deterministic corpus of a few MB is built here: every example of the built-in library and of
a few extra signatures written for the tricky cases (caseless, scoped flags, lookarounds,
anchors, non-ASCII, an unanalysable pattern), decorated the ways real logs are: rank prefixes,
ANSI codes (also inside keywords), ``\\r`` progress bars, CRLF, NULs, invalid UTF-8, letters that
fold to ASCII under ``(?i)``, lines cut at the length limit, multi-step sequences a few lines
apart. It is framed in uneven chunks, as the tailer reads.

The reference is the same pipeline with the prefilter off (``prefilter="none"``): every step's
regex on every normalised line, fed to the same sequence tracker. Detections must be equal,
field by field, for the pure-Python prefilter and, when ``hyperscan`` is importable, for the
Hyperscan one.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from sigwatch.clock import FakeClock
from sigwatch.engine.prefilter import hyperscan_available
from sigwatch.framing.lines import LineFramer
from sigwatch.model import StreamInfo
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sources.base import StreamOpened

REPO = Path(__file__).resolve().parent.parent.parent
GOODLOGS = REPO / "tests" / "corpus" / "goodlogs"

EXTRA = {
    "eq_caseless_segfault": (
        r"(?i)segfault\s+at\s+(?P<addr>[0-9a-f]+)", None,
        ["SEGFAULT AT 7f00ab", "segfault  at dead", "Segfault at 0"]),
    "eq_scoped_flag": (
        r"Watchdog (?i:timed out) after (?P<ms>\d+) ?ms", None,
        ["Watchdog TIMED OUT after 600000 ms", "Watchdog timed out after ٣٠٠ms"]),
    "eq_lookarounds": (
        r"(?<=\] )GPU (?:lost|hung)(?! recovered)\b", None,
        ["[node7] GPU lost", "[x] GPU hung for 3s", "[x] GPU hung recovered"]),
    "eq_non_ascii": (
        r"Überhitzung: (?P<temp>\d+)°C", None,
        ["Überhitzung: 97°C", "WARN Überhitzung: ９７°C"]),
    "eq_unanalysable": (
        r"\p{Lu}{2,}_FATAL\b", None,
        ["GPU_FATAL", "ÉCHEC_FATAL reached"]),
    "eq_anchored": (
        r"^ERROR: disk (?P<dev>\w+) failed$", None,
        ["ERROR: disk sda failed", "ERROR: disk nvme0n1 failed"]),
    "eq_bounded_any": (
        r"job \[[^|\]]{3,5}\] aborted", None,
        ["job [ab€d] aborted", "job [日本語] aborted", "job [x] aborted"]),
    "eq_two_steps_caseless": (
        r"panic: (?P<what>\w+)", (r"(?i)goroutine \d+ \[running\]", 4),
        ["panic: nil", "Goroutine 17 [RUNNING]:"]),
}


def _extra_toml(sig_id: str, regex: str, then: tuple[str, int] | None) -> str:
    text = f"id = {sig_id!r}\ntitle = 'Equivalence {sig_id}'\nseverity = 'error'\n"
    text += f"[match]\nregex = '''{regex}'''\n"
    if then is not None:
        text += f"[[match.then]]\nregex = '''{then[0]}'''\nwithin_lines = {then[1]}\n"
    return text


@pytest.fixture(scope="module", name="patterns")
def _patterns(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("extra_patterns")
    for sig_id, (regex, then, _lines) in EXTRA.items():
        (root / f"{sig_id}.toml").write_text(_extra_toml(sig_id, regex, then), encoding="utf-8")
    patterns, errors = load_patterns([builtin_pattern_dir(), root])
    assert [] == errors
    return patterns


# --- corpus --------------------------------------------------------------------------------

_ANSI = [b"\x1b[31m", b"\x1b[0m", b"\x1b[1;32m", b"\x1b]0;title\x07", b"\x1b(", b"\x1b[2K",
         b"#033[2m", b"#033[0m"]  # the last two: ESC as rsyslog escapes it
_BAD = [b"\xff", b"\xe2\x96", b"\xc3", b"\x80\x80", b"\xed\xa0\x80"]


def _mangle(rng: random.Random, line: bytes) -> bytes:
    roll = rng.random()
    if roll < 0.12:  # ANSI code anywhere, keywords included
        k = rng.randrange(len(line) + 1)
        return line[:k] + rng.choice(_ANSI) + line[k:]
    if roll < 0.18:  # NUL anywhere
        k = rng.randrange(len(line) + 1)
        return line[:k] + b"\x00" + line[k:]
    if roll < 0.26:  # invalid UTF-8 anywhere
        k = rng.randrange(len(line) + 1)
        return line[:k] + rng.choice(_BAD) + line[k:]
    if roll < 0.34:  # tqdm rewrite before and/or after
        bar = "Epoch 1:  37%|███▋      | 37/100 [00:03<00:06]".encode()
        return bar + b"\r" + line + (b"\r" + bar if rng.random() < 0.5 else b"")
    if roll < 0.40:
        return line + b"\r"  # CRLF
    if roll < 0.48:  # change case, or use letters that fold to ASCII under (?i)
        text = line.decode("utf-8", "replace")
        text = "".join(
            c.swapcase() if rng.random() < 0.3 else
            {"s": "\u017f", "k": "\u212a", "i": "\u0130"}.get(c, c) if rng.random() < 0.3 else c
            for c in text)
        return text.encode()
    if roll < 0.52 and rng.random() < 0.04:  # over the 64 KiB limit: kept or cut
        pad = b"x" * 70_000
        return line + b" " + pad if rng.random() < 0.5 else pad + b" " + line
    return line


def _decorate(rng: random.Random, line: bytes) -> bytes:
    roll = rng.random()
    if roll < 0.2:
        line = b"[rank%d]: " % rng.randrange(16) + line
    elif roll < 0.3:
        line = b"%d: " % rng.randrange(16) + line
    elif roll < 0.35:
        line = b"[default3]:" + line
    return _mangle(rng, line)


def _corpus(patterns, size: int = 3_000_000, seed: int = 17) -> bytes:
    rng = random.Random(seed)
    blocks: list[list[bytes]] = []
    for sig in patterns.signatures:
        for ex in sig.examples:
            blocks.append([t.encode() for t in ex.text.split("\n")])
    for _sig_id, (_regex, _then, lines) in EXTRA.items():
        blocks.extend([line.encode()] for line in lines)
    for _ in range(20):  # a caseless second step, inside and outside its window
        blocks.append([b"panic: oops", b"goroutine 1 [running]:"])
        blocks.append([b"panic: late"] + [b"  frame"] * 6 + [b"goroutine 2 [running]:"])
    good = [line for p in sorted(GOODLOGS.glob("*.log"))
            for line in p.read_bytes().split(b"\n") if line]
    # every multi-line example once as written, so that multi-step signatures fire whatever
    # the random draw below does to their lines (it mangles, interleaves and splits them)
    out: list[bytes] = [line.encode() for sig in patterns.signatures for ex in sig.examples
                        if ex.kind == "match" and "\n" in ex.text
                        for line in ex.text.split("\n")]
    total = sum(len(line) + 1 for line in out)
    while total < size:
        if rng.random() < 0.35:
            block = rng.choice(blocks)
            rank = b"[rank%d]: " % rng.randrange(4) if rng.random() < 0.3 else b""
            for k, line in enumerate(block):
                piece = _mangle(rng, rank + line) if rank else _decorate(rng, line)
                out.append(piece)
                total += len(piece) + 1
                if k + 1 < len(block):
                    for _ in range(rng.randrange(4)):
                        out.append(rng.choice(good))
        else:
            piece = _decorate(rng, rng.choice(good)) if rng.random() < 0.3 else rng.choice(good)
            out.append(piece)
            total += len(piece) + 1
    return b"\n".join(out) + b"\nno newline at the end: CUDA error: out of memory"


# --- runs ----------------------------------------------------------------------------------

def _detect(patterns, data: bytes, backend: str, seed: int = 3) -> list[tuple]:
    sink = CollectingSink()
    engine = Engine(patterns, prefilter=backend)
    pipeline = Pipeline(engine, [sink], clock=FakeClock())
    handle = pipeline.new_handle()
    # "scan" holds mixed content: every signature applies (kernel-only ones included).
    pipeline.open(StreamOpened(handle, StreamInfo("src", "f.log", "k"), kind="scan"))
    framer = LineFramer()
    rng = random.Random(seed)
    pos = 0
    while pos < len(data):
        step = rng.choice([1, 7, 300, 4096, 65_536, 1 << 20])
        pipeline.process(handle, framer.feed(data[pos:pos + step]))
        pos += step
    pipeline.process(handle, framer.finish())
    return [(d.signature, d.line, d.offset, d.first_offset, d.rank, d.text, d.captures,
             d.context, d.root_cause) for d in sink.detections]


@pytest.fixture(scope="module", name="corpus")
def _corpus_fixture(patterns) -> bytes:
    return _corpus(patterns)


@pytest.fixture(scope="module", name="reference")
def _reference(patterns, corpus: bytes) -> list[tuple]:
    return _detect(patterns, corpus, "none")


BACKENDS = ["python"] + (["hyperscan"] if hyperscan_available() else [])


@pytest.mark.parametrize("backend", BACKENDS)
def test_fast_path_detects_exactly_what_every_regex_on_every_line_detects(
        patterns, corpus: bytes, reference: list[tuple], backend: str) -> None:
    """Same detections, same order, same fields, for a few MB of hostile but real-shaped log."""
    assert len(corpus) > 2_000_000
    found = _detect(patterns, corpus, backend)

    missing = [d for d in reference if d not in found]
    extra = [d for d in found if d not in reference]
    assert ([], []) == (missing[:5], extra[:5])
    assert reference == found


def test_the_corpus_exercises_what_it_claims(patterns, reference: list[tuple]) -> None:
    """Guard against a corpus too kind to prove anything."""
    fired = {d[0] for d in reference}
    library = {s.id for s in patterns.signatures if not s.id.startswith("eq_")}
    assert len(fired & library) >= 0.8 * len(library)
    assert set(EXTRA) - {"eq_unanalysable"} <= fired | {"eq_unanalysable"}
    assert "eq_unanalysable" in fired  # the forced (every line) path ran
    assert "nvidia_gpu_fallen_off_bus_multiline" in fired  # a multi-step library signature
    assert "eq_two_steps_caseless" in fired
    assert any(d[4] is not None for d in reference)  # rank prefixes were seen
    assert len(reference) > 1000


def test_the_unanalysable_signature_runs_on_every_line(patterns) -> None:
    """A pattern the prefilter cannot reason about is never skipped, only slower."""
    engine = Engine(patterns, prefilter="python")
    forced = {patterns.signatures[i].id for i, _k in engine.prefilter.forced}
    assert {"eq_unanalysable"} == forced
