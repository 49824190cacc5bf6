"""Template mining, novel errors and bursts."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import re
import sys
from pathlib import Path

import pytest
from support.detector_driver import DetectorDriver

from sigwatch.cli import main
from sigwatch.clock import FakeClock
from sigwatch.detectors.burst import BurstDetector
from sigwatch.detectors.templates import (
    ERROR_INTEREST,
    NovelErrorDetector,
    TemplateMiner,
    looks_like_error,
)
from sigwatch.model import LogLine, Match

REPO = Path(__file__).resolve().parent.parent.parent
GOODLOGS = REPO / "tests" / "corpus" / "goodlogs"
# The Loghub 2k samples live outside the repository: SIGWATCH_LOGHUB=DIR (see docs/detectors.md).
LOGHUB = Path(os.environ.get("SIGWATCH_LOGHUB", "")) if os.environ.get("SIGWATCH_LOGHUB") else None


def _perturbed(data: bytes, seed: int) -> bytes:
    """The same log with every number but a lone 0 (success) replaced, width kept."""
    rng = random.Random(seed)

    def other(m: re.Match[bytes]) -> bytes:
        width = len(m.group())
        if m.group() == b"0":
            return b"0"
        return f"{rng.randrange(1, 10 ** width):0{width}d}".encode()

    return re.sub(rb"\d+", other, data)


class TestTemplateMiner:
    def test_lines_differing_in_variables_share_a_template(self) -> None:
        """Numbers, hex, paths and key=value values are masked; the words decide the group."""
        miner = TemplateMiner()
        a = miner.add("Saving checkpoint to /ckpt/run-17/step_100 took 12.5 s (rank 3)")
        b = miner.add("Saving checkpoint to /ckpt/run-18/step_200 took 9.1 s (rank 0)")
        c = miner.add("Loading checkpoint from /ckpt/run-18/step_200")

        assert a.template_id == b.template_id
        assert c.template_id != a.template_id
        assert "Saving checkpoint to <*> took <*> s" == b.template

    def test_snapshot_restores_the_same_templates_and_ids(self) -> None:
        """A restarted miner recognises what it learned, with the same ids, after JSON."""
        miner = TemplateMiner(header=True)
        lines = [f"2024-06-02 10:00:{i:02d} worker {i} failed: connection refused by 10.0.0.{i}"
                 for i in range(30)] + ["disk /dev/sda1 is full", "disk /dev/sdb2 is full"]
        ids = [miner.add(line).template_id for line in lines]

        again = TemplateMiner(header=True)
        again.restore(json.loads(json.dumps(miner.snapshot())))

        assert ids[-1] == again.add("disk /dev/sdc3 is full").template_id
        assert not again.add("2024-06-02 11:00:00 worker 7 failed: connection refused by x").created

    def test_memory_is_bounded_and_evicted_templates_are_not_new(self) -> None:
        """Past max_templates the least recently used go; a returning one is 'seen before'."""
        miner = TemplateMiner(max_templates=50)
        words = [f"alpha{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(200)]
        for w in words:
            miner.add(f"{w} happened here now")

        assert 50 == len(miner)
        back = miner.add(f"{words[0]} happened here now")
        assert back.created and back.seen_before

    @pytest.mark.skipif(importlib.util.find_spec("drain3") is None
                        or LOGHUB is None or not (LOGHUB / "HDFS").exists(),
                        reason="needs drain3 (test extra) and SIGWATCH_LOGHUB=DIR naming the "
                               "Loghub 2k samples (DIR/HDFS, DIR/Linux)")
    def test_grouping_accuracy_is_at_least_drain3s_on_two_systems(self) -> None:
        """The accuracy bench on HDFS and Linux: sigwatch >= both Drain3 configurations."""
        sys.path.insert(0, str(REPO / "bench"))
        try:
            import miner_accuracy
        finally:
            sys.path.remove(str(REPO / "bench"))

        assert LOGHUB is not None
        rows = dict(miner_accuracy.score([LOGHUB / "HDFS", LOGHUB / "Linux"]))

        for scores in rows.values():
            assert scores["sigwatch"] >= max(scores["drain3_default"], scores["drain3_masked"])
        assert rows["Linux"]["sigwatch"] > 0.75


class TestErrorLooking:
    @pytest.mark.parametrize("text", [
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "Traceback (most recent call last):",
        "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
        "srun: error: node17: task 3: Exited with exit code 1",
        "FATAL: could not open /dev/nvidia0",
        "process exited with status 137",
    ])
    def test_error_lines_are_selected_and_confirmed(self, text: str) -> None:
        """Interest (bytes, C) selects them and the Python check confirms them."""
        assert ERROR_INTEREST.search(text.encode()) is not None
        assert looks_like_error(text)

    @pytest.mark.parametrize("text", [
        "eval/loss=1.2 val_error=0.01 error_rate: 0.02",
        "2024-06-02 10:00:00 INFO completed with 0 errors",
        "[2024-06-02] [INFO] retry_on_failure: False",
        "dgx-h100-017:48211:48410 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so.",
    ])
    def test_benign_lines_with_error_words_are_not_errors(self, text: str) -> None:
        """Metric names, 'no errors', settings and INFO-level chatter are not error reports."""
        assert not looks_like_error(text)


class TestNovelError:
    def _driver(self, clock: FakeClock, **kw: object) -> tuple[DetectorDriver,
                                                               NovelErrorDetector]:
        det = NovelErrorDetector(clock, **kw)  # type: ignore[arg-type]
        return DetectorDriver([det], clock), det

    def test_silent_on_the_benign_corpus_after_the_learning_period(self) -> None:
        """Learn on the benign corpus; the same kinds of logs with other numbers: silent."""
        clock = FakeClock()
        driver, det = self._driver(clock, learn_lines=10_000, learn_seconds=3600.0)
        for path in sorted(GOODLOGS.glob("*.log")):
            stream = driver.open(path.name)
            driver.feed(stream, path.read_bytes(), seconds_per_line=0.5)
        driver.advance(3600.0)
        assert not det.learning
        assert [] == driver.detections

        for seed, path in enumerate(sorted(GOODLOGS.glob("*.log"))):
            stream = driver.open(f"next-run/{path.name}")
            driver.feed(stream, _perturbed(path.read_bytes(), seed), seconds_per_line=0.5)

        assert [] == [d.text for d in driver.detections]

    def test_a_new_kind_of_error_after_learning_is_one_warning(self) -> None:
        """An unseen error shape raises novel_error with its template; its repeats do not."""
        clock = FakeClock()
        driver, det = self._driver(clock, learn_lines=5, learn_seconds=1e9)
        stream = driver.open()
        driver.feed_lines(stream, [f"worker {i}: connection refused, retrying" for i in range(5)])
        assert not det.learning

        driver.feed_lines(stream, [
            f"[rank{i}]: RuntimeError: frobnicator failed at 0x7f{i:04x}" for i in range(3)])

        found = [d for d in driver.detections if d.signature == "novel_error"]
        assert 1 == len(found)
        d = found[0]
        assert "warning" == d.severity.label
        assert "RuntimeError: frobnicator failed at <*>" == dict(d.facts)["template"]
        assert "0" == d.rank
        assert all(k != "template_id" for k, _ in d.labels)

    def test_nothing_fires_during_the_learning_period(self) -> None:
        """Before learn_lines error lines (or learn_seconds), every template is being learned."""
        clock = FakeClock()
        driver, _det = self._driver(clock, learn_lines=100, learn_seconds=3600.0)
        stream = driver.open()

        driver.feed_lines(stream, [f"error {w}: disk failed" for w in ("a", "bb", "ccc")])

        assert [] == driver.detections

    def test_a_line_a_signature_knows_is_not_novel(self) -> None:
        """Known signatures explain their lines: the miner learns them, novel_error is quiet."""
        clock = FakeClock()
        det = NovelErrorDetector(clock, learn_lines=0)

        def matcher(line: LogLine) -> tuple[Match, ...]:
            return (Match("cuda_oom", 0, line),) if "out of memory" in line.text else ()

        driver = DetectorDriver([det], clock, matcher=matcher)
        stream = driver.open()
        driver.feed_lines(stream, ["RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"])

        assert [] == driver.detections

    def test_novel_errors_are_rate_limited(self) -> None:
        """Forty different new error shapes within an hour: at most max_per_hour detections."""
        clock = FakeClock()
        driver, det = self._driver(clock, learn_lines=0, max_per_hour=5)
        stream = driver.open()
        shapes = [f"error: {chr(97 + i % 26)}{chr(97 + i // 26)}x subsystem {w} broke"
                  for i, w in enumerate(["alpha", "beta", "gamma", "delta"] * 10)]

        driver.feed_lines(stream, shapes, seconds_per_line=1.0)

        assert 5 == len(driver.detections)
        assert det.suppressed > 0

    def test_learning_survives_a_restart(self) -> None:
        """Templates and the learning clock come back from the snapshot: no re-learning."""
        clock = FakeClock()
        driver, det = self._driver(clock, learn_lines=3, learn_seconds=1e9)
        stream = driver.open()
        driver.feed_lines(stream, [f"job {i} failed with exit code {i + 1}" for i in range(3)])
        state = json.loads(json.dumps(det.snapshot()))

        clock2 = FakeClock()
        driver2, det2 = self._driver(clock2, learn_lines=3, learn_seconds=1e9)
        det2.restore(state)
        stream2 = driver2.open()
        assert not det2.learning
        driver2.feed_lines(stream2, ["job 9 failed with exit code 3",
                                     "mount of /scratch failed: stale file handle"])

        assert ["mount of /scratch failed: stale file handle"] == [
            d.text for d in driver2.detections]


class TestBurst:
    def _match_nccl(self, line: LogLine) -> tuple[Match, ...]:
        return (Match("nccl_warn", 0, line),) if "NCCL WARN" in line.text else ()

    def test_a_signature_rate_jump_is_one_burst(self) -> None:
        """One NCCL WARN a minute for ten minutes, then 200 in a minute: one burst detection."""
        clock = FakeClock()
        det = BurstDetector(clock)
        driver = DetectorDriver([det], clock, matcher=self._match_nccl)
        stream = driver.open()
        for _ in range(10):
            driver.feed_lines(stream, ["node1:1:2 [0] NCCL WARN Net : Call to recv failed"])
            driver.advance(60.0)
        assert [] == driver.detections

        driver.feed_lines(stream, ["node1:1:2 [0] NCCL WARN Net : Call to recv failed"] * 200,
                          seconds_per_line=0.2)

        assert ["burst"] == [d.signature for d in driver.detections]
        facts = dict(driver.detections[0].facts)
        assert "nccl_warn" == facts["signature"]
        assert 20 <= int(facts["count"]) <= 25

    def test_a_steady_high_rate_is_not_a_burst(self) -> None:
        """A signature that always fires 100 times a minute is its own baseline."""
        clock = FakeClock()
        det = BurstDetector(clock)
        driver = DetectorDriver([det], clock, matcher=self._match_nccl)
        stream = driver.open()

        driver.feed_lines(stream, ["x NCCL WARN Net : Call to recv failed"] * 3000,
                          seconds_per_line=0.6)

        assert [] == driver.detections

    def test_a_template_burst_is_found_through_the_shared_miner(self) -> None:
        """Unknown error lines bursting: counted per template, one burst, no id in labels."""
        clock = FakeClock()
        novel = NovelErrorDetector(clock, learn_lines=0)
        burst = BurstDetector(clock, miner=novel.miner)
        driver = DetectorDriver([novel, burst], clock)
        stream = driver.open()
        for i in range(8):
            driver.feed_lines(stream, [f"storage: write to /mnt/x/{i} failed, errno 5"])
            driver.advance(60.0)

        driver.feed_lines(stream, [f"storage: write to /mnt/x/{i} failed, errno 5"
                                   for i in range(100)], seconds_per_line=0.1)

        bursts = [d for d in driver.detections if d.signature == "burst"]
        assert 1 == len(bursts)
        assert (("burst_of", "template"),) == bursts[0].labels


class TestTemplatesCommand:
    def test_prints_one_template_per_line_as_csv(self, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
        """``sigwatch templates --format csv``: file, line, id, template for every line."""
        log = tmp_path / "a.log"
        log.write_text("2024-06-02 10:00:01 job 1 failed\n2024-06-02 10:00:02 job 22 failed\n"
                       "disk full\n")

        assert 0 == main(["templates", "--format", "csv", str(log)])

        rows = capsys.readouterr().out.splitlines()
        assert "file,line,template_id,template" == rows[0]
        assert 4 == len(rows)
        first, second, third = (r.split(",") for r in rows[1:])
        assert first[2] == second[2] != third[2]
        assert "job <*> failed" == first[3]

    def test_text_format_prints_id_and_template(self, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
        """The default text format is ``T<id><TAB>template``."""
        log = tmp_path / "a.log"
        log.write_text("disk full\n")

        assert 0 == main(["templates", str(log)])

        assert "T1\tdisk full\n" == capsys.readouterr().out


def test_interest_regex_is_not_a_plain_case_insensitive_alternation() -> None:
    """The error interest starts every branch with a literal byte (fast skip in ``re``)."""
    assert ERROR_INTEREST.flags & re.IGNORECASE == 0
    assert io is not None
