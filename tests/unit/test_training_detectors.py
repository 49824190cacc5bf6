"""Step-time regressions, incident 004, stalls and bad numbers on generated training logs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.detector_driver import DetectorDriver
from support.training_logs import FORMATS, MI300_ROCM_630_HEADER, progress_lines, run

from sigwatch.clock import FakeClock
from sigwatch.detectors.base import Detector
from sigwatch.detectors.training import (
    BadNumbersDetector,
    LossTrendDetector,
    ProgressReader,
    StallDetector,
    StepTimeDetector,
)
from sigwatch.model import Detection

GOODLOGS = Path(__file__).resolve().parent.parent / "corpus" / "goodlogs"


def _detectors(clock: FakeClock) -> list[Detector]:
    reader = ProgressReader()
    return [StepTimeDetector(clock, reader=reader), StallDetector(clock, reader=reader),
            BadNumbersDetector(clock, reader=reader), LossTrendDetector(clock, reader=reader)]


def _driver(clock: FakeClock) -> DetectorDriver:
    return DetectorDriver(_detectors(clock), clock)


def _only(detections: list[Detection], signature: str) -> list[Detection]:
    return [d for d in detections if d.signature == signature]


def _facts(d: Detection) -> dict[str, str]:
    return dict(d.facts)


class TestHealthyRuns:
    @pytest.mark.parametrize("fmt", FORMATS)
    def test_a_healthy_run_raises_nothing(self, fmt: str) -> None:
        """400 steps with 3% jitter, printed as the trainer prints them: no detection."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()

        driver.feed_lines(stream, run(fmt, 400), seconds_per_line=0.5)
        driver.close(stream)

        assert [] == [(d.signature, d.about) for d in driver.detections]

    @pytest.mark.parametrize("name", sorted(p.name for p in GOODLOGS.glob("*.log")))
    def test_benign_corpus_logs_raise_nothing(self, name: str) -> None:
        """The real healthy logs of the test corpus (warm-ups, checkpoints, eval bars): silent."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open(name)

        driver.feed(stream, (GOODLOGS / name).read_bytes(), seconds_per_line=1.0)
        driver.close(stream)

        assert [] == [(d.signature, d.about) for d in driver.detections]

    def test_checkpoint_pause_and_eval_raise_nothing(self) -> None:
        """A 12x slow step while saving, a 2-minute silent save and an eval bar: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        driver.feed_lines(stream, run("megatron", 200), seconds_per_line=1.0)
        driver.feed_lines(stream, ["saving checkpoint at iteration 200 to /ckpt in torch format"])
        driver.advance(120.0)
        driver.feed_lines(stream, progress_lines("megatron", 201, 9.6, 2.9))
        driver.feed_lines(stream, [
            f"Validation DataLoader 0:  {p}%|██        | {p}/100 [00:02<00:10, 0.5it/s]"
            for p in range(1, 100, 10)], seconds_per_line=5.0)
        driver.feed_lines(stream, run("megatron", 200, start=202), seconds_per_line=1.0)

        assert [] == [(d.signature, d.about) for d in driver.detections]


class TestStepTimeRegression:
    @pytest.mark.parametrize("fmt", FORMATS)
    def test_tripled_step_time_raises_one_regression_with_figures(self, fmt: str) -> None:
        """Step time x3 from step 200 on: one regression, before ~0.8 s, after ~2.4 s."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()

        driver.feed_lines(stream, run(fmt, 400, slow_from=200), seconds_per_line=0.5)

        found = _only(driver.detections, "step_time_regression")
        assert 1 == len(found), [d.about for d in driver.detections]
        assert [] == [d for d in driver.detections if d.signature != "step_time_regression"]
        facts = _facts(found[0])
        if "before_step_seconds" in facts:
            before, after = (float(facts["before_step_seconds"]),
                             float(facts["after_step_seconds"]))
        else:  # DeepSpeed's timer prints samples/s: 64 samples per step here
            before, after = (64 / float(facts["before_throughput"]),
                             64 / float(facts["after_throughput"]))
        assert 0.8 == pytest.approx(before, rel=0.05)
        assert 2.4 == pytest.approx(after, rel=0.08)
        assert 3.0 == pytest.approx(float(facts["ratio"]), rel=0.1)
        assert "004" not in found[0].title

    def test_mi300_rocm_630_stream_names_incident_004_and_its_fix(self) -> None:
        """Same slowdown after MI300 / gfx942 / ROCm 6.3.0 lines: incident 004 with its fix."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()

        driver.feed_lines(stream, MI300_ROCM_630_HEADER)
        driver.feed_lines(stream, run("megatron", 300, slow_from=150), seconds_per_line=1.0)

        found = _only(driver.detections, "step_time_regression")
        assert 1 == len(found)
        d = found[0]
        assert "Incident 004" in d.title
        assert "error" == d.severity.label
        assert "004" == _facts(d)["incident"]
        fix = " ".join(d.remediation.steps)
        assert "MIOPEN_FIND_MODE=3" in fix
        assert "MIOPEN_FIND_ENFORCE=3" in fix
        assert "ROCm 6.3.1" in fix

    def test_mi300_on_another_rocm_release_is_a_plain_regression(self) -> None:
        """MI300 with ROCm 6.2: the slowdown is reported, but not as incident 004."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()

        driver.feed_lines(stream, [("torch 2.5.1+rocm6.2 | MIOpen 3.2.0 | devices: 8 x AMD "
                                   "Instinct MI300X"), "ROCm version: 6.2.4"])
        driver.feed_lines(stream, run("megatron", 300, slow_from=150), seconds_per_line=1.0)

        found = _only(driver.detections, "step_time_regression")
        assert 1 == len(found)
        assert "incident" not in _facts(found[0])
        assert "MIOPEN_FIND_MODE=3" not in " ".join(found[0].remediation.steps)

    def test_restart_in_the_middle_of_a_regression_neither_repeats_nor_forgets(self) -> None:
        """Snapshot after 3 slow steps, restart, re-read two of them: exactly one alert."""
        lines = run("nanogpt", 300, slow_from=200)
        data = "".join(line + "\n" for line in lines).encode()
        cut = sum(len(line) + 1 for line in lines[:202])  # slow steps 200-202 seen, then crash
        clock = FakeClock()
        first = _driver(clock)
        stream = first.open()
        first.feed(stream, data[:cut], seconds_per_line=0.5)
        states = [json.loads(json.dumps(d.snapshot())) for d in first.detectors]
        assert [] == first.detections

        clock2 = FakeClock()
        second = _driver(clock2)
        for det, state in zip(second.detectors, states, strict=True):
            det.restore(state)
        resumed = second.open()
        reread_from = sum(len(line) + 1 for line in lines[:200])  # checkpoint lag: 201-202
        resumed.offset, resumed.lineno = reread_from, 200  # are read again after the restart
        second.feed(resumed, data[reread_from:], seconds_per_line=0.5)

        found = _only(second.detections, "step_time_regression")
        assert 1 == len(found)
        assert 204 == found[0].line  # the 5th slow step: 3 before the crash, 2 new after
        states = [json.loads(json.dumps(d.snapshot())) for d in second.detectors]

        third = _driver(FakeClock())
        for det, state in zip(third.detectors, states, strict=True):
            det.restore(state)
        # new slow steps written after the restored offset, so that they are judged
        again = third.open(offset=len(data), lineno=len(lines))
        third.feed_lines(again, run("nanogpt", 50, start=301, slow_from=0))
        offsets = third.detectors[0].snapshot()["offsets"]  # type: ignore[index]
        assert max(offsets.values()) > len(data)  # the new lines were judged, not skipped
        assert [] == third.detections  # already reported: no repeat after a second restart


class TestStall:
    def test_silent_run_raises_one_stall_and_its_resolution(self) -> None:
        """Progress every 10 s, then 20 minutes of silence, then progress: stall + resolved."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        driver.feed_lines(stream, run("plain", 50), seconds_per_line=10.0)

        for _ in range(20):
            driver.advance(60.0)

        stalls = _only(driver.detections, "training_stalled")
        assert 1 == len(stalls)
        stall = stalls[0]
        assert stall.line is None and stall.offset is None
        assert "error" == stall.severity.label
        assert 300 <= float(_facts(stall)["silent_seconds"]) <= 360
        assert "50" == _facts(stall)["last_step"]

        driver.feed_lines(stream, run("plain", 1, start=51))

        resolved = _only(driver.detections, "training_stalled")[1:]
        assert ["resolved"] == [d.status for d in resolved]
        assert stall.event_id != resolved[0].event_id
        assert 2 == len(driver.detections)

    def test_stream_closed_cleanly_is_not_a_stall(self) -> None:
        """The job ended and its stream was let go: silence afterwards is not a stall."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        driver.feed_lines(stream, run("plain", 50), seconds_per_line=10.0)
        driver.close(stream, clean=True)

        driver.advance(3600.0)

        assert [] == driver.detections

    def test_run_that_printed_its_end_is_not_a_stall(self) -> None:
        """An HF Trainer run that printed its final summary stays silent without alerting."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        driver.feed_lines(stream, run("hf_trainer", 50), seconds_per_line=10.0)
        driver.feed_lines(stream, [("{'train_runtime': 512.3, 'train_samples_per_second': 9.8, "
                                   "'train_loss': 1.23, 'epoch': 3.0}")])

        driver.advance(3600.0)

        assert [] == driver.detections

    def test_stall_deadline_survives_a_restart(self) -> None:
        """Snapshot while progressing, restart, reopen: the silence still raises one stall."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        driver.feed_lines(stream, run("plain", 30), seconds_per_line=10.0)
        states = [json.loads(json.dumps(d.snapshot())) for d in driver.detectors]

        clock2 = FakeClock()
        second = _driver(clock2)
        for det, state in zip(second.detectors, states, strict=True):
            det.restore(state)
        assert second.advance(3600.0) == []  # not reopened yet: not judged
        second.open()
        second.advance(400.0)

        assert ["training_stalled"] == [d.signature for d in second.detections]


class TestBadNumbers:
    @pytest.mark.parametrize("fmt", ["megatron", "hf_trainer", "lightning", "nanogpt",
                                     "plain", "keras", "lightning_rich"])
    def test_nan_losses_raise_one_error(self, fmt: str) -> None:
        """Loss NaN from step 100 on (dict, key: value, key value, key=value): one error."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()

        driver.feed_lines(stream, run(fmt, 200, nan_from=100), seconds_per_line=0.5)

        found = _only(driver.detections, "training_nonfinite")
        assert 1 == len(found), [d.about for d in driver.detections]
        assert "error" == found[0].severity.label
        assert "loss" in _facts(found[0])["nonfinite"]

    def test_a_single_nan_step_raises_nothing(self) -> None:
        """One NaN step that the run recovers from is not 'several consecutive'."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()

        driver.feed_lines(stream, run("plain", 200, nan_from=100, nan_to=102))

        assert [] == driver.detections

    def test_fp16_loss_scale_warmup_raises_nothing(self) -> None:
        """DeepSpeed's scale search at start (overflow lines, inf grad norms): nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        scale = 65536
        lines = []
        for step in range(1, 8):
            lines.append(f"[2024-03-18 14:02:45,286] [INFO] [loss_scaler.py:183:update_scale]"
                         f" [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale:"
                         f" {scale}, reducing to {scale // 2}")
            lines.append(f"step {step} | loss 10.5 | grad_norm inf | loss scale {scale // 2} |"
                         f" step_time 0.8s")
            scale //= 2
        driver.feed_lines(stream, lines, seconds_per_line=0.5)
        driver.feed_lines(stream, run("plain", 200, start=8), seconds_per_line=0.5)

        assert [] == driver.detections

    def test_loss_scale_falling_to_its_minimum_raises_one_error(self) -> None:
        """Megatron fp16 whose scale halves every step down to 1: one error."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = []
        scale = 2.0 ** 16
        for step in range(1, 30):
            lines.append(f" iteration {step:>8d}/  100000 | elapsed time per iteration (ms):"
                         f" 800.0 | lm loss: 7.1E+00 | loss scale: {scale:.1f} |"
                         f" number of skipped iterations:   1 | number of nan iterations:   0 |")
            scale = max(scale / 2, 1.0)
        driver.feed_lines(stream, lines)

        found = _only(driver.detections, "training_loss_scale_minimum")
        assert 1 == len(found)
        assert "1" == _facts(found[0])["loss_scale"]
        assert [] == _only(driver.detections, "training_nonfinite")


def _megatron(step: int, loss: float, scale: float | None = None, skipped: int = 0) -> str:
    """One Megatron iteration line (fp16 when it prints a loss scale)."""
    fp16 = f" loss scale: {scale:.1f} |" if scale is not None else ""
    return (f" iteration {step:>8d}/  100000 | consumed samples: {step * 512:>12d} |"
            f" elapsed time per iteration (ms): 812.5 | learning rate: 1.500000E-04 |"
            f" global batch size:   512 | lm loss: {loss:.6E} |{fp16} grad norm: 1.234 |"
            f" number of skipped iterations: {skipped:>3d} | number of nan iterations:   0 |")


def _losses(steps: int, *, start: int = 1, level: float = 2.0, noise: float = 0.03,
            jump_at: int | None = None, jump: float = 3.0, seed: int = 4) -> list[float]:
    """A loss falling slowly around ``level`` with relative noise, times ``jump`` from
    step ``jump_at`` on."""
    import random  # noqa: PLC0415

    rng = random.Random(seed)
    out = []
    for step in range(start, start + steps):
        x = level * (1 - step * 2e-4) * (1 + rng.gauss(0, noise))
        if jump_at is not None and step >= jump_at:
            x *= jump
        out.append(x)
    return out


class TestLossDiverged:
    def test_a_loss_that_triples_and_stays_raises_one_warning_naming_the_step(self) -> None:
        """Loss ~2.0, then x3 from step 200 on: one warning, since step 200, 2.0 -> 6.0."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        losses = _losses(300, jump_at=200)

        driver.feed_lines(stream, [_megatron(step, x) for step, x in enumerate(losses, 1)])

        found = _only(driver.detections, "training_loss_diverged")
        assert 1 == len(found), [d.about for d in driver.detections]
        d = found[0]
        assert "warning" == d.severity.label
        facts = _facts(d)
        assert "200" == facts["since_step"]
        assert 2.0 == pytest.approx(float(facts["before_loss"]), rel=0.05)
        assert 6.0 == pytest.approx(float(facts["after_loss"]), rel=0.05)
        assert "user" == d.owner
        assert [] == [x for x in driver.detections if x.signature != "training_loss_diverged"]

    @pytest.mark.parametrize("fmt", ["hf_trainer", "nanogpt", "plain", "keras", "lightning"])
    def test_every_progress_shape_with_a_loss(self, fmt: str) -> None:
        """The same jump printed by other trainers: one warning each."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = []
        for step, x in enumerate(_losses(400, jump_at=250), 1):
            lines.extend(progress_lines(fmt, step, 0.8, x))

        driver.feed_lines(stream, lines)

        assert 1 == len(_only(driver.detections, "training_loss_diverged"))

    def test_a_single_spike_raises_nothing(self) -> None:
        """One step at 5x the loss, then back: not 'doubled and stayed'."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        losses = _losses(300)
        losses[199] *= 5

        driver.feed_lines(stream, [_megatron(step, x) for step, x in enumerate(losses, 1)])

        assert [] == driver.detections

    def test_a_spike_of_a_few_steps_raises_nothing(self) -> None:
        """Five steps at 3x (shorter than the sustain window), then back: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        losses = _losses(300)
        for i in range(199, 204):
            losses[i] *= 3

        driver.feed_lines(stream, [_megatron(step, x) for step, x in enumerate(losses, 1)])

        assert [] == driver.detections

    def test_noisy_loss_raises_nothing(self) -> None:
        """A small-batch fine-tune: loss noise of 30% around a falling trend: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        losses = _losses(2000, noise=0.3, level=1.2, seed=9)

        driver.feed_lines(stream, [_megatron(step, x) for step, x in enumerate(losses, 1)])

        assert [] == driver.detections

    def test_the_early_fall_of_the_loss_raises_nothing(self) -> None:
        """From 10.8 down to 2.5 in the first 300 steps, then steady: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = [_megatron(step, 2.5 + 8.3 * 0.985 ** step) for step in range(1, 600)]

        driver.feed_lines(stream, lines)

        assert [] == driver.detections

    def test_another_run_in_the_same_stream_is_not_a_jump(self) -> None:
        """A run at loss 0.13, then a job restarted from step 1 at loss 4.8 (steps go back):
        its loss is its own, not a jump of the first one."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        first = [_megatron(step, x) for step, x in enumerate(_losses(200, level=0.13), 1)]
        second = [_megatron(step, x) for step, x in enumerate(_losses(200, level=4.8), 1)]

        driver.feed_lines(stream, [*first, *second])

        assert [] == driver.detections

    def test_back_to_normal_then_a_second_divergence_raises_a_second_warning(self) -> None:
        """Jump, recovery for 100 steps, jump again: two warnings (the first is re-armed)."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        losses = _losses(600)
        for i in range(200, 260):
            losses[i] *= 3
        for i in range(400, 460):
            losses[i] *= 3

        driver.feed_lines(stream, [_megatron(step, x) for step, x in enumerate(losses, 1)])

        found = _only(driver.detections, "training_loss_diverged")
        assert ["201", "401"] == [_facts(d)["since_step"] for d in found]


def _overflow(wording: str, attempted: float, reduced: float) -> str:
    if wording == "deepspeed":
        return (f"[2024-03-18 14:02:45,286] [INFO] [loss_scaler.py:183:update_scale]"
                f" [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale:"
                f" {attempted:.0f}, reducing to {reduced:.0f}")
    if wording == "fused":
        return (f"[2024-03-18 14:03:34,047] [INFO] [fused_optimizer.py:344:step] Overflow"
                f" detected. Skipping step. Attempted loss scale: {attempted:.0f}, reducing"
                f" to {reduced:.1f}")
    return (f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to"
            f" {reduced:.1f}")


class TestLossScaleCollapse:
    @pytest.mark.parametrize("wording", ["deepspeed", "fused", "apex"])
    def test_overflow_on_every_step_mid_run_raises_one_warning(self, wording: str) -> None:
        """Start-up search, 300 good steps, then an overflow at every step: one warning with
        the scale before and after."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        scale = 2.0 ** 32
        lines = []
        while scale > 65536:  # the start-up search: halving at the first steps is normal
            lines.append(_overflow(wording, scale, scale / 2))
            scale /= 2
        lines += run("plain", 300, start=1)
        for _ in range(8):
            lines.append(_overflow(wording, scale, scale / 2))
            scale /= 2
        lines += run("plain", 20, start=301)

        driver.feed_lines(stream, lines)

        found = _only(driver.detections, "training_loss_scale_collapse")
        assert 1 == len(found), [d.about for d in driver.detections]
        facts = _facts(found[0])
        assert "5" == facts["halvings"]
        assert "warning" == found[0].severity.label
        assert float(facts["loss_scale"]) == pytest.approx(65536 / 32)
        if wording != "apex":  # apex prints only the new scale
            assert float(facts["loss_scale_from"]) == pytest.approx(65536)

    def test_megatron_scale_halved_on_every_logged_line_mid_run(self) -> None:
        """fp16 Megatron: a steady scale, then skipped iterations on each logged line with
        the scale halving: one warning naming the step it started at."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = [_megatron(step, 2.0, 65536.0) for step in range(1, 100)]
        scale = 65536.0
        for step in range(100, 110):
            scale /= 2
            lines.append(_megatron(step, 2.0, scale, skipped=1))

        driver.feed_lines(stream, lines)

        found = _only(driver.detections, "training_loss_scale_collapse")
        assert 1 == len(found)
        assert "100" == _facts(found[0])["since_step"]
        assert "104" == _facts(found[0])["step"]

    def test_the_start_up_search_raises_nothing(self) -> None:
        """DeepSpeed halving from 2^32 to 2^16 in its first steps, then training: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        scale = 2.0 ** 32
        lines = []
        while scale > 65536:
            lines.append(_overflow("deepspeed", scale, scale / 2))
            scale /= 2
        lines += run("plain", 300)

        driver.feed_lines(stream, lines)

        assert [] == driver.detections

    def test_an_overflow_now_and_then_raises_nothing(self) -> None:
        """One overflow every 100 steps, the scale growing back in between: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = []
        for block in range(8):
            lines += run("plain", 100, start=block * 100 + 1)
            lines.append(_overflow("deepspeed", 131072, 65536))

        driver.feed_lines(stream, lines)

        assert [] == driver.detections

    def test_a_few_overflows_in_a_row_then_recovery_raise_nothing(self) -> None:
        """Three halvings in a row mid-run (fewer than five), then steady: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = [_megatron(step, 2.0, 65536.0) for step in range(1, 100)]
        scale = 65536.0
        for step in range(100, 103):
            scale /= 2
            lines.append(_megatron(step, 2.0, scale, skipped=1))
        lines += [_megatron(step, 2.0, scale) for step in range(103, 200)]

        driver.feed_lines(stream, lines)

        assert [] == driver.detections

    def test_a_collapse_after_a_restart_mid_run_is_still_seen(self) -> None:
        """Snapshot mid-run (settled), restart, then overflows on every step: one warning."""
        clock = FakeClock()
        first = _driver(clock)
        stream = first.open()
        lines = [_megatron(step, 2.0, 65536.0) for step in range(1, 100)]
        data = "".join(line + "\n" for line in lines).encode()
        first.feed(stream, data)
        states = [json.loads(json.dumps(d.snapshot())) for d in first.detectors]

        second = _driver(FakeClock())
        for det, state in zip(second.detectors, states, strict=True):
            det.restore(state)
        resumed = second.open(offset=len(data), lineno=len(lines))
        scale = 65536.0
        more = []
        for step in range(100, 110):
            scale /= 2
            more.append(_megatron(step, 2.0, scale, skipped=1))
        second.feed_lines(resumed, more)

        assert 1 == len(_only(second.detections, "training_loss_scale_collapse"))


def _hf_log(loss: float, epoch: float) -> str:
    return f"{{'loss': {loss}, 'grad_norm': 641.9, 'learning_rate': 5e-05, 'epoch': {epoch}}}"


def _bar(step: int, total: int = 6400) -> str:
    pct = 100 * step // total
    return f" {pct:2d}%|██        | {step}/{total} [1:16:09<1:07:04,  1.33it/s]"


_LOWERED = {
    # torch_npu / apex on Ascend: the overflow and its new scale on two lines
    "npu": ["Gradient overflow. Skipping step", "Loss scaler reducing loss scale to {new:.1f}"],
    # DeepSpeed's fused optimizer: the same halving reported by two loggers
    "fused": ["Reducing dynamic loss scale from {old:.0f} to {new:.1f}",
              "[Rank 0] Overflow detected. Skipping step. Attempted loss scale: {old:.0f},"
              " reducing to {new:.1f}"],
    # DeepSpeed's unfused optimizer
    "unfused": ["Grad overflow on iteration: {it}",
                "Reducing dynamic loss scale from {old:.1f} to {new:.1f}",
                "[deepspeed] fp16 dynamic loss scale overflow! Skipping step. Attempted loss"
                " scale: {old:.1f}, reducing to {new:.1f}"],
    # fairseq
    "fairseq": ["NOTE: gradient overflow detected, ignoring gradient, setting loss scale to:"
                " {new:.1f}"],
    # prose
    "prose": ["[fp16] loss scale lowered from {old:.0f} to {new:.0f} after an overflow"],
}


def _lowered(wording: str, old: float, new: float, it: int = 5000, *,
             ranks: int = 1) -> list[str]:
    """One halving as ``wording`` prints it (by ``ranks`` ranks without a prefix)."""
    return [line.format(old=old, new=new, it=it) for line in _LOWERED[wording]
            for _ in range(ranks)]


def _apex_halvings(first: float, last: float) -> list[str]:
    """apex's overflow lines lowering the scale from ``first`` down to ``last``, no step."""
    return [f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to {2.0 ** e}"
            for e in range(int(math.log2(first)), int(math.log2(last)) - 1, -1)]


class TestLossScaleCollapseUnderWay:
    """Training shown under way (an optimiser step past 200, an epoch done) makes a run of
    halvings from below 2^15 mid-run, even when the log holds no start of the run."""

    @pytest.mark.parametrize("wording", sorted(_LOWERED))
    def test_halvings_after_an_epoch_of_training_raise_one_warning(self, wording: str) -> None:
        """A log that starts mid-run (epoch 4.7): the scale halved 8 times from 1024, each
        halving printed by two ranks without a prefix: one warning, 8 halvings counted once."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = [_hf_log(5.28, 4.7)]
        scale = 1024.0
        for k in range(8):
            lines += _lowered(wording, scale, scale / 2, it=9000 + k, ranks=2)
            scale /= 2
            if k == 3:
                lines.append(_hf_log(5.3, 4.71))

        driver.feed_lines(stream, lines)

        found = _only(driver.detections, "training_loss_scale_collapse")
        assert 1 == len(found), [d.about for d in driver.detections]
        facts = _facts(found[0])
        assert "5" == facts["halvings"]  # it fires at the fifth
        assert float(facts["loss_scale"]) == pytest.approx(1024 / 32)

    def test_a_tqdm_step_glued_to_the_overflow_line_shows_training_under_way(self) -> None:
        """DeepSpeed's overflow line glued to the bar at 1044/6400, five times: the bar's step
        is the overflow's step; one warning naming the step it started at."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = []
        scale = 128.0
        for step in range(1044, 1049):
            lines.append(f"{_bar(step)}[2023-02-28 20:08:24,113] [INFO] [stage_1_and_2.py:1769:"
                         f"step] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss"
                         f" scale: {scale}, reducing to {scale / 2}")
            scale /= 2

        driver.feed_lines(stream, lines)

        found = _only(driver.detections, "training_loss_scale_collapse")
        assert 1 == len(found), [d.about for d in driver.detections]
        assert "1044" == _facts(found[0])["since_step"]
        assert "128" == _facts(found[0])["loss_scale_from"]

    def test_the_same_halvings_at_the_first_steps_raise_nothing(self) -> None:
        """The start-up search from a low configured scale, at steps 3 to 7 and epoch 0.01:
        nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = []
        scale = 4096.0
        for step in range(3, 10):
            lines.append(f"{_bar(step)}[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted"
                         f" loss scale: {scale}, reducing to {scale / 2}")
            lines.append(_hf_log(10.5, 0.01))
            scale /= 2

        driver.feed_lines(stream, lines)

        assert [] == driver.detections

    def test_eight_halvings_from_below_the_search_are_a_collapse_without_a_step(self) -> None:
        """apex between epochs prints no step: from 512 down to 2, eight halvings in a row
        from below any start-up search's 2^15: one warning, at the eighth."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        driver.feed_lines(stream, ["Epoch: 15", *_apex_halvings(256.0, 2.0)])

        found = _only(driver.detections, "training_loss_scale_collapse")
        assert 1 == len(found), [d.about for d in driver.detections]
        assert "8" == _facts(found[0])["halvings"]

    def test_seven_halvings_from_below_the_search_without_a_step_raise_nothing(self) -> None:
        """The same from 256 to 4 (seven): a search caught mid-way could look like this."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        driver.feed_lines(stream, _apex_halvings(256.0, 4.0))

        assert [] == driver.detections

    def test_a_fresh_search_of_a_resumed_job_raises_nothing(self) -> None:
        """Training under way (step 5000), then a resumed job whose scaler starts again at
        2^16 and halves 7 times: a start-up search, nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = run("plain", 5, start=5000)
        scale = 65536.0
        for step in range(5005, 5012):
            lines.append(f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale:"
                         f" {scale:.0f}, reducing to {scale / 2:.0f}")
            lines += run("plain", 1, start=step)
            scale /= 2

        driver.feed_lines(stream, lines)

        assert [] == driver.detections

    @pytest.mark.parametrize("wording", ["fused", "unfused", "npu"])
    def test_a_halving_reported_on_several_lines_counts_once(self, wording: str) -> None:
        """Settled (a steady scale), then three halvings, each printed on two or three lines
        by two ranks: three halvings, fewer than five: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = [_megatron(step, 2.0, 1024.0) for step in range(1, 30)]
        scale = 1024.0
        for k in range(3):
            lines += _lowered(wording, scale, scale / 2, it=30 + k, ranks=2)
            scale /= 2
        lines += [_megatron(step, 2.0, scale) for step in range(33, 60)]

        driver.feed_lines(stream, lines)

        assert [] == driver.detections

    def test_the_scale_growing_back_in_between_raises_nothing(self) -> None:
        """Under way; DeepSpeed lowers, then raises the scale after good steps, five times:
        an overflow now and then, not a collapse."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        lines = run("plain", 5, start=3000)
        for k in range(5):
            lines += _lowered("fused", 1024.0, 512.0)
            lines.append("[fused_optimizer.py:352:_update_scale] No Grad overflow for 200"
                         " iterations")
            lines.append("[fused_optimizer.py:353:_update_scale] Increasing dynamic loss scale"
                         " from 512.0 to 1024.0")
            lines += run("plain", 3, start=3005 + 3 * k)

        driver.feed_lines(stream, lines)

        assert [] == driver.detections


def _every_ten(losses: list[float], first: int) -> list[str]:
    """Megatron lines logged every 10 iterations from ``first``."""
    return [_megatron(first + 10 * k, x) for k, x in enumerate(losses)]


class TestLossClimb:
    """A loss that rises steeply on several logged lines in a row is a divergence as it
    happens, before any baseline is doubled."""

    def test_a_steep_steady_climb_names_the_iterations_and_the_figures(self) -> None:
        """150 lines at ~6.7, then 6.37 -> 6.60 -> 7.31 -> 9.12 -> 10.24: one warning at the
        fifth line, naming iterations 6900 to 6940 and every figure."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        before = _losses(150, level=6.9, noise=0.02)
        climb = [6.365808, 6.598378, 7.314456, 9.121927, 10.23865]

        driver.feed_lines(stream, _every_ten([*before, *climb], 5400))

        found = _only(driver.detections, "training_loss_diverged")
        assert 1 == len(found), [d.about for d in driver.detections]
        facts = _facts(found[0])
        assert ("climb", "6900", "6940", "4") == (facts["rule"], facts["since_step"],
                                                  facts["step"], facts["rises"])
        assert "6.366 -> 6.598 -> 7.314 -> 9.122 -> 10.24" == facts["losses"]
        assert "warning" == found[0].severity.label

    def test_a_log_that_starts_with_the_climb(self) -> None:
        """Only the five climbing lines (an excerpt, a daemon started mid-run): one warning."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()

        driver.feed_lines(stream, _every_ten([6.37, 6.60, 7.31, 9.12, 10.24], 6900))

        assert 1 == len(_only(driver.detections, "training_loss_diverged"))

    def test_a_climb_of_three_lines_that_turns_back_raises_nothing(self) -> None:
        """A recovering spike: three rises (2.6 -> 4.4), then back to 2.5: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        losses = [*_losses(100, level=2.5), 2.8, 2.6, 3.1, 3.8, 4.4, 3.2, 2.7,
                  *_losses(50, level=2.5)]

        driver.feed_lines(stream, _every_ten(losses, 10))

        assert [] == driver.detections

    def test_a_rebound_within_the_noise_raises_nothing(self) -> None:
        """A noisy loss (20 %) dips to half its level and climbs back in four rises: twice
        where it began, but no higher than the loss already was: nothing."""
        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        losses = [*_losses(100, level=1.0, noise=0.2), 0.5, 0.62, 0.75, 0.9, 1.05,
                  *_losses(50, level=1.0, noise=0.2, seed=5)]

        driver.feed_lines(stream, _every_ten(losses, 10))

        assert [] == driver.detections

    def test_noisy_bars_that_restart_every_epoch_raise_nothing(self) -> None:
        """Lightning-style bars whose step starts at 1 each epoch (a new series each time),
        loss noise of 40 %, each epoch after the first opening with four rises (0.6 -> 1.3)
        inside that noise: the losses of the epochs before stay the yardstick; nothing."""
        import random  # noqa: PLC0415

        clock = FakeClock()
        driver = _driver(clock)
        stream = driver.open()
        rng = random.Random(11)
        lines = []
        for epoch in range(12):
            losses = [0.6, 0.75, 0.9, 1.1, 1.3] if epoch else []  # (the first: no history)
            losses += [max(0.05, rng.gauss(1.0, 0.4)) for _ in range(100 - len(losses))]
            for step, loss in enumerate(losses, 1):
                lines.append(f"Epoch {epoch}:  {step:2d}%|█         | {step}/100 [00:10<00:20,"
                             f" 3.20it/s, loss={loss:.3f}, v_num=0]")

        driver.feed_lines(stream, lines)

        assert [] == _only(driver.detections, "training_loss_diverged")


def _iteration(step: int, loss: float | None, scale: float, skipped: int = 0) -> str:
    """A Megatron(-DeepSpeed) fp16 iteration line; ``loss`` None: the line carries none
    (Megatron leaves a loss that is not > 0, NaN included, out of the line)."""
    lm = f" lm loss: {loss:.6E} |" if loss is not None else ""
    return (f" iteration {step:>8d}/  159576 | consumed samples: {step * 2048:>12d} |"
            f" elapsed time per iteration (ms): 423042.3 | learning rate: 5.948E-05 |"
            f" global batch size:  2048 |{lm} loss scale: {scale:.1f} | grad norm: 464441.887 |"
            f" number of skipped iterations: {skipped:>3d} | number of nan iterations:   0 |")


def _feed(driver: DetectorDriver, lines: list[str], *, whole: bool) -> None:
    """Line by line (a live tail), or all at once (one chunk: the prepass reads it)."""
    stream = driver.open()
    if whole:
        driver.feed(stream, ("\n".join(lines) + "\n").encode())
    else:
        driver.feed_lines(stream, lines)


def _jump_log(wording: str, *, jump: float = 1.64, back_after: int | None = None,
              halvings: int = 5, first: int = 17000, before: int = 60,
              after: int = 8) -> list[str]:
    """fp16 iteration lines at ~2.67 from ``first``, then the loss ``jump`` times higher on
    ``after`` lines (back to 2.67 after ``back_after`` of them), with ``halvings`` overflow
    lines (``wording``) on consecutive steps from the jump on; the lines print the scale."""
    lines = []
    scale = 1048576.0
    level = _losses(before, level=2.67, noise=0.01)
    for k, x in enumerate(level):
        lines.append(_iteration(first + k, x, scale))
    for k in range(after):
        step = first + before + k
        up = back_after is None or k < back_after
        lines.append(_iteration(step, 2.67 * (jump if up else 1.0) * (1 + 0.005 * k), scale))
        if k < halvings:
            lines.append(_overflow(wording, scale, scale / 2))
            scale /= 2
    return lines


class TestLossJumpWithOverflows:
    """A loss that jumps by 1.5x or more and stays up while fp16 overflows skip steps and
    halve the loss scale is a divergence, though it never doubles (BLOOM 104B's 2.67 ->
    4.37 while DeepSpeed halved the scale on consecutive steps)."""

    @pytest.mark.parametrize("whole", [False, True])
    @pytest.mark.parametrize("wording", ["deepspeed", "fused", "apex"])
    def test_a_jump_that_stays_while_the_scale_halves_names_the_steps(
            self, wording: str, whole: bool) -> None:
        """2.67 -> 4.38 at iteration 17060, staying, three halvings by 17064: one warning
        there, rule jump_overflow, from 17060, with the halvings counted."""
        driver = _driver(FakeClock())

        _feed(driver, _jump_log(wording), whole=whole)

        found = _only(driver.detections, "training_loss_diverged")
        assert 1 == len(found), [d.about for d in driver.detections]
        facts = _facts(found[0])
        assert ("jump_overflow", "17060", "17064") == (facts["rule"], facts["since_step"],
                                                       facts["step"])
        assert int(facts["halvings"]) >= 2
        assert 1.64 == pytest.approx(float(facts["ratio"]), rel=0.03)
        assert "warning" == found[0].severity.label

    def test_the_scale_printed_on_the_iteration_lines_is_enough(self) -> None:
        """Megatron alone (no overflow lines): the scale its lines print halves as the loss
        stays 1.6x up: one warning."""
        lines = []
        for k, x in enumerate(_losses(60, level=2.5, noise=0.01)):
            lines.append(_iteration(9000 + k, x, 65536.0))
        scale = 65536.0
        for k in range(6):
            scale /= 2 if k < 3 else 1
            lines.append(_iteration(9060 + k, 4.0 + 0.01 * k, scale, skipped=0))
        driver = _driver(FakeClock())

        _feed(driver, lines, whole=True)

        assert ["jump_overflow"] == [_facts(d)["rule"] for d in _only(
            driver.detections, "training_loss_diverged")]

    def test_hugging_face_dicts_with_apex_overflows(self) -> None:
        """The loss dicts of the HF Trainer (no step printed) and apex's overflow lines."""
        lines = [_hf_log(round(x, 4), 3 + k / 100)
                 for k, x in enumerate(_losses(60, level=1.2, noise=0.01))]
        scale = 32768.0
        for k in range(6):
            lines.append(_hf_log(round(1.9 + 0.01 * k, 4), 3.6 + k / 100))
            if k < 3:
                lines.append(_overflow("apex", scale, scale / 2))
                scale /= 2
        driver = _driver(FakeClock())

        _feed(driver, lines, whole=False)

        assert 1 == len(_only(driver.detections, "training_loss_diverged"))

    @pytest.mark.parametrize("whole", [False, True])
    def test_the_same_jump_without_overflows_raises_nothing(self, whole: bool) -> None:
        """1.64x and staying, no overflow, the scale unchanged: under the doubling rule's
        2x, and no halving: nothing."""
        driver = _driver(FakeClock())

        _feed(driver, _jump_log("deepspeed", halvings=0), whole=whole)

        assert [] == driver.detections

    def test_a_spike_that_turns_back_raises_nothing(self) -> None:
        """The jump and the halvings, but the loss is back after two lines: a spike the
        scaler rode out."""
        driver = _driver(FakeClock())

        _feed(driver, _jump_log("deepspeed", back_after=2, halvings=3), whole=True)

        assert [] == _only(driver.detections, "training_loss_diverged")

    def test_a_rise_under_the_ratio_raises_nothing(self) -> None:
        """1.3x and staying with three halvings: not a jump."""
        driver = _driver(FakeClock())

        _feed(driver, _jump_log("deepspeed", jump=1.3, halvings=3), whole=True)

        assert [] == _only(driver.detections, "training_loss_diverged")

    def test_one_halving_printed_twice_is_not_two(self) -> None:
        """A single halving reported by two loggers (DeepSpeed's fused optimizer and its
        scaler) and the iteration lines printing the same scale: one halving; nothing."""
        lines = _jump_log("deepspeed", halvings=0)
        at = next(i for i, t in enumerate(lines) if " 17060/" in t)
        lines[at + 1:at + 1] = [_overflow("fused", 1048576.0, 524288.0),
                                _overflow("deepspeed", 1048576.0, 524288)]
        driver = _driver(FakeClock())

        _feed(driver, lines, whole=False)

        assert [] == _only(driver.detections, "training_loss_diverged")

    def test_the_start_up_search_raises_nothing(self) -> None:
        """Steps 20-40: the loss 1.6x up for a few lines while the scaler searches down from
        2^16 (training not yet under way): nothing."""
        driver = _driver(FakeClock())

        _feed(driver, _jump_log("deepspeed", first=10, before=10, halvings=5), whole=True)

        assert [] == _only(driver.detections, "training_loss_diverged")

    def test_halvings_long_after_the_jump_are_not_its(self) -> None:
        """The loss 1.6x up from iteration 17060 without overflows; three halvings 40 lines
        later: the jump rule has stopped looking (the collapse rule's business)."""
        lines = _jump_log("deepspeed", halvings=0, after=60)
        lines[-8:-8] = [_overflow("deepspeed", 2.0 ** 20 / 2 ** k, 2.0 ** 19 / 2 ** k)
                        for k in range(3)]
        driver = _driver(FakeClock())

        _feed(driver, lines, whole=True)

        assert [] == _only(driver.detections, "training_loss_diverged")


class TestLossDroppedOut:
    """Megatron prints a loss only when its average is above 0: a NaN or infinite loss
    drops out of the iteration line (and bf16 runs skip nothing, so the NaN counters stay
    0). A series whose loss disappears while its iterations go on lost a finite loss."""

    @pytest.mark.parametrize("whole", [False, True])
    def test_the_loss_dropping_out_names_the_step_once(self, whole: bool) -> None:
        """Iterations 3300-3384 with a loss, 3385-3390 without, none skipped: one warning
        naming 3385."""
        lines = [_iteration(3300 + k, x, 1.0) for k, x in enumerate(_losses(85, level=0.7))]
        lines += [_iteration(3385 + k, None, 1.0) for k in range(6)]
        driver = _driver(FakeClock())

        _feed(driver, lines, whole=whole)

        found = _only(driver.detections, "training_nonfinite")
        assert 1 == len(found), [d.about for d in driver.detections]
        assert ("vanished", "3385") == (_facts(found[0])["rule"], _facts(found[0])["step"])
        assert "warning" == found[0].severity.label
        assert "user" == found[0].owner

    def test_a_line_cut_short_after_the_loss_would_be(self) -> None:
        """The last line of an excerpt, cut off past the scale (read line by line): it still
        says the iteration went on without its loss."""
        lines = [_iteration(3383, 0.733, 1.0), _iteration(3384, 0.707, 1.0),
                 _iteration(3385, None, 1.0)[:190]]
        driver = _driver(FakeClock())

        _feed(driver, lines, whole=True)

        assert 1 == len(_only(driver.detections, "training_nonfinite"))

    @pytest.mark.parametrize("whole", [False, True])
    def test_skipped_iterations_without_a_loss_raise_nothing(self, whole: bool) -> None:
        """fp16: the start-up search's skipped iterations print no loss, nor does an
        overflow mid-run (1 skipped iteration): nothing."""
        lines = [_iteration(k, None, 2.0 ** (32 - k), skipped=1) for k in range(1, 12)]
        lines += [_iteration(12 + k, x, 2.0 ** 21) for k, x in enumerate(_losses(300))]
        lines.insert(200, _iteration(199, None, 2.0 ** 20, skipped=1))
        driver = _driver(FakeClock())

        _feed(driver, lines, whole=whole)

        assert [] == driver.detections

    def test_a_log_that_never_printed_a_loss_raises_nothing(self) -> None:
        """No loss before (a log that starts there, a trainer that prints none): nothing."""
        driver = _driver(FakeClock())

        _feed(driver, [_iteration(500 + k, None, 1.0) for k in range(10)], whole=True)

        assert [] == driver.detections

    @pytest.mark.parametrize("whole", [False, True])
    def test_lines_of_other_shapes_between_raise_nothing(self, whole: bool) -> None:
        """Megatron's validation lines, Hugging Face's eval and summary dicts, evaluation bars
        and a training bar redrawn without its postfix between the training lines: a loss
        those shapes leave out is not a loss gone (only Megatron drops a NaN)."""
        lines = []
        for k, x in enumerate(_losses(200, level=2.0)):
            lines.append(_iteration(1000 + k, x, 1.0))
            lines.append(_hf_log(round(x, 4), k / 100))
            lines.append(f"Epoch 0: {k // 2:2d}%|█         | {k}/400 [00:10<00:15,  3.90it/s,"
                         f" loss={x:.3f}, v_num=0]")
            if k % 50 == 49:
                lines += [
                    "-" * 60,
                    f" validation loss at iteration {1000 + k} | lm loss value: 2.01E+00 |"
                    f" lm loss PPL: 7.46E+00 |",
                    "{'eval_loss': 2.01, 'eval_runtime': 12.3, 'epoch': 1.0}",
                    " 40%|████      | 40/100 [00:10<00:15,  3.90it/s]",
                    f"Epoch 0: {k // 2:2d}%|█         | {k}/400 [00:10<00:15,  3.90it/s]",
                ]
        lines.append("{'train_runtime': 3600.1, 'train_samples_per_second': 9.1, "
                     "'train_loss': 2.0, 'epoch': 2.0}")
        driver = _driver(FakeClock())

        _feed(driver, lines, whole=whole)

        assert [] == driver.detections


def _series_fed(xs: list[float], *, block: bool) -> tuple[list[tuple[int, float, float]],
                                                         dict[str, object]]:
    """A step-time series fed ``xs`` one by one (``_update``) or as one block (``_update_many``):
    what fired (index, before, after) and the state left."""
    from collections import deque

    from sigwatch.detectors.training import _StepSeries

    detector = StepTimeDetector(FakeClock())
    series = _StepSeries("step_time", deque(maxlen=detector.window))
    fired: list[tuple[int, float, float]] = []
    if block:
        fired = [(j, before, after) for j, before, after, _state
                 in detector._update_many(series, xs, lambda j: j)]
    else:
        for j, x in enumerate(xs):
            got = detector._update(series, x, j)
            if got is not None:
                fired.append((j, got[0], got[1]))
    return fired, series.to_json()


class TestSeriesFedInBlocks:
    """A chunk's samples go through a series as one block; the result is the one-by-one result."""

    @pytest.mark.parametrize("case", ["steady", "regression", "nan_first_in_a_block",
                                      "spikes_between_quiet"])
    def test_a_block_updates_a_series_as_its_samples_one_by_one(self, case: str) -> None:
        steady = [1.0 + 0.01 * (i % 7) for i in range(60)]
        xs = {
            "steady": steady,
            "regression": steady + [2.5] * 12 + steady[:20],
            # After the baseline fills (10 warm-up + 20), a block opening on NaN: max() of the
            # block would be NaN and hide the slow samples behind it.
            "nan_first_in_a_block": steady[:30] + [math.nan] + [2.5] * 8 + steady[:10],
            "spikes_between_quiet": steady + [3.0, 1.0, 3.0, 1.0] + steady + [3.0] * 6,
        }[case]

        one_by_one = _series_fed(xs, block=False)
        in_blocks = _series_fed(xs, block=True)

        assert in_blocks == one_by_one
        if case in ("regression", "nan_first_in_a_block"):
            assert one_by_one[0], "the slow samples make a regression"
