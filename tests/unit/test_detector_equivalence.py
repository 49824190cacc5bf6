"""Per-chunk detectors give the detections (and the state) of the per-line path.

The reference is ``detector_mode="line"``: every detector gets ``on_line`` for each line, as
before per-chunk detectors existed. The path under test is the default, ``"chunk"``: step
time, stalls and bad numbers get ``on_chunk`` once per chunk from the one combined interest
pass. Both run the whole library and every detector, on the bench's generated training log
and on the training-log corpus, fed in uneven chunks with the clock moving between them.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from sigwatch.app import build_detectors
from sigwatch.clock import FakeClock
from sigwatch.detectors.base import Chunk, ChunkDetector, LineEvent, StreamContext
from sigwatch.framing.lines import LineFramer
from sigwatch.model import Detection, StreamInfo
from sigwatch.patterns.compiled import PatternSet
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sources.base import StreamOpened

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "corpus"


def _bench_log(library: PatternSet, size: int) -> bytes:
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from corpus import lines  # noqa: PLC0415 - the bench's generator, not a package
    finally:
        sys.path.remove(str(REPO / "bench"))
    out: list[bytes] = []
    total = 0
    for line in lines(library.signatures, seed=5):
        out.append(line)
        total += len(line) + 1
        if total >= size:
            break
    return b"\n".join(out) + b"\n"


def _run(engine: Engine, mode: str, inputs: Sequence[tuple[str, bytes]], *,
         replay_below: int = -1, seed: int = 7,
         sizes: Sequence[int] = (1, 700, 64 << 10, 300 << 10)) -> tuple[list[str], str]:
    """Feed every input (uneven chunks of ``sizes``, clock moving, ticks), return detections
    and state."""
    clock = FakeClock()
    sink = CollectingSink()
    pipeline = Pipeline(engine, [sink], clock=clock, detectors=build_detectors(clock=clock),
                        detector_mode=mode)
    rng = random.Random(seed)
    for handle, (name, data) in enumerate(inputs, start=1):
        info = StreamInfo("train", name, name)
        pipeline.open(StreamOpened(handle, info, replay_below=replay_below))
        framer = LineFramer()
        pos = 0
        while pos < len(data):
            size = rng.choice(sizes)
            segments = framer.feed(data[pos:pos + size])
            pos += size
            pipeline.process(handle, segments)
            clock.advance(rng.choice((0.0, 0.5, 3.0)))
            pipeline.tick()
        pipeline.process(handle, framer.finish())
        clock.advance(4000.0)  # long enough for a stall
        pipeline.tick()
    state = json.dumps(pipeline.snapshot(), sort_keys=True, default=str)
    for handle in range(1, len(inputs) + 1):
        pipeline.finish(handle)
    return sorted(json.dumps(d.to_json(), sort_keys=True) for d in sink.detections), state


@pytest.fixture(name="engine", scope="module")
def _engine(library: PatternSet) -> Engine:
    return Engine(library, prefilter="python")


class TestChunkEqualsLine:
    def test_bench_log(self, engine: Engine, library: PatternSet) -> None:
        """The bench's training log (megatron, HF dicts, tqdm bars, NCCL chatter, examples
        of every signature): same detections and the same detector state either way."""
        data = _bench_log(library, 1_500_000)

        line_found, line_state = _run(engine, "line", [("bench.log", data)])
        chunk_found, chunk_state = _run(engine, "chunk", [("bench.log", data)])

        assert line_found == chunk_found
        assert line_state == chunk_state
        assert len(line_found) > 15  # the log raises detections of several kinds
        kinds = {json.loads(d)["signature"] for d in line_found}
        assert {"step_time_regression", "training_stalled"} & kinds

    def test_training_log_corpus(self, engine: Engine) -> None:
        """Every healthy training log and incident log of the corpus, one stream each."""
        inputs = [(p.name, p.read_bytes())
                  for folder in ("goodlogs", "incidents") for p in sorted(
                      (CORPUS / folder).glob("*.log"))]
        assert len(inputs) > 10

        line_found, line_state = _run(engine, "line", inputs)
        chunk_found, chunk_state = _run(engine, "chunk", inputs)

        assert line_found == chunk_found
        assert line_state == chunk_state

    def test_replayed_lines(self, engine: Engine, library: PatternSet) -> None:
        """Lines below the replay point rebuild state and raise nothing, either way."""
        data = _bench_log(library, 400_000)

        line_found, line_state = _run(engine, "line", [("r.log", data)],
                                      replay_below=len(data) // 2)
        chunk_found, chunk_state = _run(engine, "chunk", [("r.log", data)],
                                        replay_below=len(data) // 2)

        assert line_found == chunk_found
        assert line_state == chunk_state

    def test_nonfinite_and_stall_scenario(self, engine: Engine) -> None:
        """NaN losses on ranks, a slowdown, an end-of-training line: same either way."""
        rows: list[str] = []
        for step in range(1, 400):
            ms = 100.0 if step < 200 else 180.0
            loss = "nan" if 300 <= step < 330 else f"{2.0 - step / 1000:.3f}"
            rows.append(f"[rank{step % 4}]: step {step} | loss {loss} | time {ms:.1f}ms")
            if step % 50 == 0:
                rows.append(f"2024-06-02 10:{step // 60:02d}:{step % 60:02d} INFO iter {step}: "
                            f"loss {loss}, time {ms:.0f}ms")
        # the end line, its word cut by a colour code (only the text once cleaned says it)
        rows.append("\x1b[1mTrain\x1b[0ming completed at step 399, loss 1.6")
        data = ("\n".join(rows) + "\n").encode()

        line_found, line_state = _run(engine, "line", [("s.log", data)], seed=3)
        chunk_found, chunk_state = _run(engine, "chunk", [("s.log", data)], seed=3)

        assert line_found == chunk_found
        assert line_state == chunk_state
        kinds = {json.loads(d)["signature"] for d in chunk_found}
        assert {"training_nonfinite", "step_time_regression"} <= kinds
        assert "training_stalled" not in kinds  # the run said it ended


    def test_loss_divergence_and_loss_scale_collapse_scenario(self, engine: Engine) -> None:
        """fp16 Megatron lines (read by the prepass) whose loss triples at step 300 and
        whose scale then halves on every logged line, DeepSpeed overflow lines and ranked
        HF dicts between them (read line by line): same detections and state either way."""
        rows: list[str] = []
        scale = 65536.0
        for step in range(1, 700):
            loss = 2.0 * (1 + 0.02 * ((step * 7919) % 13 - 6) / 6) * (3 if step >= 300 else 1)
            skipped = 0
            if 500 <= step < 512:
                scale /= 2
                skipped = 1
            rows.append(f" iteration {step:>8d}/  100000 | consumed samples: {step * 64:>12d} |"
                        f" elapsed time per iteration (ms): 800.0 | learning rate: 1.0E-04 |"
                        f" global batch size:    64 | lm loss: {loss:.6E} | loss scale:"
                        f" {scale:.1f} | grad norm: 1.000 | number of skipped iterations:"
                        f" {skipped:>3d} | number of nan iterations:   0 |")
            if step % 7 == 0:
                rows.append(f"[rank{step % 3}]: {{'loss': {loss / 2:.4f}, 'grad_norm': 0.5,"
                            f" 'learning_rate': 1e-05, 'epoch': {step / 700:.2f}}}")
            if step % 97 == 0:
                rows.append("[2024-03-18 14:02:45,286] [INFO] [loss_scaler.py:183:update_scale]"
                            " [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale:"
                            " 131072, reducing to 65536")
        data = ("\n".join(rows) + "\n").encode()

        line_found, line_state = _run(engine, "line", [("n.log", data)], seed=5)
        chunk_found, chunk_state = _run(engine, "chunk", [("n.log", data)], seed=5)

        assert line_found == chunk_found
        assert line_state == chunk_state
        kinds = {json.loads(d)["signature"] for d in chunk_found}
        assert {"training_loss_diverged", "training_loss_scale_collapse"} <= kinds


    def test_loss_jump_with_halvings_and_loss_dropping_out_scenario(self, engine: Engine,
                                                                     ) -> None:
        """Megatron lines (the prepass; no scale printed) at ~2.7 whose loss jumps 1.6x at
        step 560 while DeepSpeed overflow lines (line by line, one printed twice) halve the
        scale, a second
        rank whose loss then drops out of its lines, and skipped iterations without a loss:
        same detections and state either way."""
        rows: list[str] = []
        scale = 2.0 ** 20
        for step in range(400, 700):
            for rank in (0, 1):
                loss: float | None = 2.7 * (1 + 0.01 * ((step * 7919) % 13 - 6) / 6)
                if rank == 0 and step >= 560:
                    loss = 1.6 * 2.7 + 0.001 * (step - 560)
                if rank == 1 and step >= 640:
                    loss = None
                skipped = 1 if rank == 1 and step % 41 == 0 else 0
                if skipped:
                    loss = None
                lm = f" lm loss: {loss:.6E} |" if loss is not None else ""
                rows.append(f"[rank{rank}]: iteration {step:>8d}/  100000 | consumed samples:"
                            f" {step * 64:>12d} | elapsed time per iteration (ms): 800.0 |"
                            f" learning rate: 1.0E-04 | global batch size:    64 |{lm}"
                            f" grad norm: 1.000 | number of skipped"
                            f" iterations: {skipped:>3d} | number of nan iterations:   0 |")
            if 560 <= step < 564:
                for _logger in range(2 if step == 561 else 1):
                    rows.append(f"[rank0]: [2024-03-18 14:02:45,286] [INFO] [deepspeed]"
                                f" OVERFLOW! Rank 0 Skipping step. Attempted loss scale:"
                                f" {scale:.0f}, reducing to {scale / 2:.0f}")
                scale /= 2
        data = ("\n".join(rows) + "\n").encode()

        for seed in range(1, 9):  # chunks cut in different places, some of a line or two
            sizes = (1, 700, 64 << 10, 300 << 10) if seed % 2 else (1, 300, 700, 2000)
            line_found, line_state = _run(engine, "line", [("j.log", data)], seed=seed,
                                          sizes=sizes)
            chunk_found, chunk_state = _run(engine, "chunk", [("j.log", data)], seed=seed,
                                            sizes=sizes)

            assert line_found == chunk_found, seed
            assert line_state == chunk_state, seed
        rules = {(d["signature"], dict(d["facts"]).get("rule"))
                 for d in map(json.loads, chunk_found)}
        assert {("training_loss_diverged", "jump_overflow"),
                ("training_nonfinite", "vanished")} <= rules


class _Collect:
    """A per-chunk detector that records the lines its interest hands it."""

    name = "collect"
    interest = None

    def __init__(self, *patterns: bytes) -> None:
        self._interests = tuple(re.compile(p) for p in patterns)
        self.seen: list[tuple[int, str]] = []

    @property
    def interests(self) -> tuple[re.Pattern[bytes], ...]:
        return self._interests

    def on_chunk(self, chunk: Chunk, mask: int) -> Sequence[Detection]:
        for line in chunk.select(mask):
            self.seen.append((line.lineno, chunk.parts(line)[0].text))
        return ()

    def on_open(self, stream: StreamContext) -> None:
        return None

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        return ()

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        return ()

    def tick(self, now: float) -> Sequence[Detection]:
        return ()

    def next_deadline(self) -> float | None:
        return None

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        return None

    def held(self, handle: int) -> tuple[int, ...]:
        return ()

    def snapshot(self) -> object:
        return None

    def restore(self, state: object) -> None:
        return None


class TestInterests:
    def test_any_detector_interest_joins_the_one_pass(self, engine: Engine) -> None:
        """A new detector names its patterns; the one pass hands it exactly its lines (and
        the lines signatures matched), numbered, normalised, after the others' interests."""
        mine = _Collect(rb"widget \d+ broke", rb"gizmo")
        assert isinstance(mine, ChunkDetector)
        clock = FakeClock()
        pipeline = Pipeline(engine, [CollectingSink()], clock=clock,
                            detectors=[*build_detectors(clock=clock), mine])
        data = (b"step 1 loss 2.0\n"
                b"[rank3]: widget 7 broke\n"
                b"nothing here\n"
                b"a gizmo and step 2 loss 1.0\n"
                b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
        pipeline.open(StreamOpened(1, StreamInfo("s", "x.log", "x")))

        pipeline.process(1, LineFramer().feed(data))

        assert [(2, "widget 7 broke"), (4, "a gizmo and step 2 loss 1.0"),
                (5, "RuntimeError: CUDA error: an illegal memory access was encountered")] \
            == mine.seen
        assert len(pipeline.interests.patterns) >= 4  # progress, errors, platform, end, mine


class _LineCollect:
    """A per-line detector that records the texts it is handed (and whether they matched)."""

    line_time = False

    def __init__(self, name: str, interest: bytes,
                 gate: Callable[[str], bool] | None = None) -> None:
        self.name = name
        self.interest = re.compile(interest)
        if gate is not None:
            self.unmatched_gate = gate
        self.seen: list[tuple[str, bool]] = []

    def on_line(self, event: LineEvent) -> Sequence[Detection]:
        self.seen.append((event.line.text, bool(event.matches)))
        return ()

    def on_open(self, stream: StreamContext) -> None:
        return None

    def on_close(self, stream: StreamContext, *, clean: bool) -> Sequence[Detection]:
        return ()

    def tick(self, now: float) -> Sequence[Detection]:
        return ()

    def next_deadline(self) -> float | None:
        return None

    def replay_floor(self, handle: int) -> tuple[int, int] | None:
        return None

    def held(self, handle: int) -> tuple[int, ...]:
        return ()

    def snapshot(self) -> object:
        return None

    def restore(self, state: object) -> None:
        return None


class TestUnmatchedGate:
    """A per-line detector's ``unmatched_gate``: unmatched lines whose text fails it are not
    handed to it (no event is built), matched lines always are, and a detector without a gate
    that wants the same line still gets it."""

    _DATA = (b"oops: all good, nothing fatal here\n"   # passes the gate ("fatal")
             b"oops: retry 1 of 3\n"                   # fails it
             b"\x1b[2moops\x1b[0m fatal after colour\n"  # passes once normalised
             b"RuntimeError: CUDA error: an illegal memory access was encountered oops\n")

    def _seen(self, engine: Engine, *detectors: _LineCollect) -> None:
        pipeline = Pipeline(engine, [CollectingSink()], clock=FakeClock(),
                            detectors=list(detectors))
        pipeline.open(StreamOpened(1, StreamInfo("s", "x.log", "x")))
        pipeline.process(1, LineFramer().feed(self._DATA))

    def test_a_gated_detector_gets_unmatched_lines_that_pass_and_every_matched_line(
            self, engine: Engine) -> None:
        gated = _LineCollect("gated", rb"oops", gate=lambda text: "fatal" in text)

        self._seen(engine, gated)

        assert [("oops: all good, nothing fatal here", False),
                ("oops fatal after colour", False),
                ("RuntimeError: CUDA error: an illegal memory access was encountered oops",
                 True)] == gated.seen

    def test_a_detector_without_a_gate_still_gets_every_line_it_wants(
            self, engine: Engine) -> None:
        gated = _LineCollect("gated", rb"oops", gate=lambda text: False)
        plain = _LineCollect("plain", rb"oops")

        self._seen(engine, gated, plain)

        assert 4 == len(plain.seen)
        assert [True] == [matched for _text, matched in gated.seen]
