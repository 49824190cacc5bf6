"""Step-time regressions, incident 004, stalls and bad numbers on generated training logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.detector_driver import DetectorDriver
from support.training_logs import FORMATS, MI300_ROCM_630_HEADER, progress_lines, run

from sigwatch.clock import FakeClock
from sigwatch.detectors.base import Detector
from sigwatch.detectors.training import (
    BadNumbersDetector,
    ProgressReader,
    StallDetector,
    StepTimeDetector,
)
from sigwatch.model import Detection

GOODLOGS = Path(__file__).resolve().parent.parent / "corpus" / "goodlogs"


def _detectors(clock: FakeClock) -> list[Detector]:
    reader = ProgressReader()
    return [StepTimeDetector(clock, reader=reader), StallDetector(clock, reader=reader),
            BadNumbersDetector(clock, reader=reader)]


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
