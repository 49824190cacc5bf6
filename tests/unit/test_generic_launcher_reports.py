"""A dead rank's traceback, and its launcher's report of the death, read from different files.

With per-rank log files (torchrun ``--log-dir``, Slurm ``--output=%t``) nothing follows a dead
rank's traceback on its own stream, and the launcher's report that the rank's process ended is
written a second or so later into another file, which may be read first. The generic layer takes
that report as the evidence that the traceback ended its process: the traceback stops waiting
(its job's verdict settles 20 s after its first error), and the report is never its root cause
(the traceback stays the user's error, not a warning explained by torchrun's exit code). With
nothing to end it, a traceback waits ``hold_seconds`` (10 s), within the verdict's settle time.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from support.generic import only, text_of

from sigwatch.app import build_generic
from sigwatch.clock import FakeClock
from sigwatch.config import GenericSettings
from sigwatch.detectors.jobs import JobBook
from sigwatch.framing.lines import LineFramer
from sigwatch.model import Detection, Severity, StreamInfo
from sigwatch.patterns.compiled import PatternSet
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sources.base import StreamOpened
from sigwatch.sources.identity import JobIdentity, PathLabels, identify
from sigwatch.telemetry.metrics import JobCollector

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules" / \
    "sigwatch.rules.yml"
JOB_LOGS = r"/jobs/(?P<job>[^/]+)/(?:rank(?P<rank>\d+)|launcher)\.log$"
TRACEBACK = text_of('''
    Traceback (most recent call last):
      File "/workspace/llm/train.py", line 412, in <module>
        main()
      File "/workspace/llm/train.py", line 377, in main
        batch = collate(rows)
      File "/workspace/llm/data.py", line 88, in collate
        return [row["input_ids"] for row in rows]
    KeyError: 'input_ids'
    ''')
TORCHRUN_FAILED = ("E0323 21:57:08.583000 1051 torch/distributed/elastic/multiprocessing/api.py"
                   ":869] failed (exitcode: 1) local_rank: 3 (pid: 2103) of binary: "
                   "/usr/bin/python3")
EXIT_REPORTS = {
    "torchrun 2.4+": TORCHRUN_FAILED,
    "torchrun 1.x": ("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) "
                     "local_rank: 3 (pid: 2103) of binary: /usr/bin/python3"),
    "torchrun failure table": "  exitcode  : 1 (pid: 2103)",
    "ChildFailedError": "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "SIGTERM fan-out": ("W0323 21:57:08.181000 1051 torch/distributed/elastic/multiprocessing/"
                        "api.py:897] Sending process 2100 closing signal SIGTERM"),
    "torchelastic restart": "[default] Worker group FAILED. 3/3 attempts left; will restart "
                            "worker group",
    "srun task": "srun: error: gpu-node-3: task 3: Exited with exit code 1",
    "srun tasks killed": "srun: error: gpu-node-3: tasks 0-7: Killed",
    "slurmstepd": "slurmstepd: error: *** STEP 4242.0 ON gpu-node-3 CANCELLED AT "
                  "2024-03-23T21:57:09 ***",
    "mpirun": ("mpirun noticed that process rank 3 with PID 2103 on node gpu-node-3 exited on "
               "signal 9 (Killed)."),
    "Open MPI": "Primary job  terminated normally, but 1 process returned",
    "MPICH": "=   EXIT CODE: 9",
    "torch.multiprocessing": ("torch.multiprocessing.spawn.ProcessExitedException: process 3 "
                              "terminated with exit code 1"),
    "DeepSpeed": ("[2024-03-23 21:57:08,583] [ERROR] [launch.py:321:sigkill_handler] "
                  "['/usr/bin/python3', '-u', 'train.py'] exits with return code = 1"),
    "shell": ("/var/spool/slurmd/job1234/slurm_script: line 14: 88213 Killed"
              "                  python train.py"),
}


class _Node:
    """One node's pipeline with the real library, the generic layer, job identity from the path
    (``jobs/<job>/rank<r>.log``, ``jobs/<job>/launcher.log``) and the job gauges, driven as the
    runtime drives it: lines read, then ``tick`` when a deadline is due."""

    def __init__(self, library: PatternSet, *, mode: str = "chunk") -> None:
        self.clock = FakeClock(1_700_000_000.0)
        self.sink = CollectingSink()
        self.registry = CollectorRegistry()
        self.book = JobBook()
        self.registry.register(JobCollector("gpu-node-3", self.book.rows))
        labels = PathLabels(JOB_LOGS)

        def who(info: StreamInfo) -> JobIdentity | None:
            return identify(info.path, labels) if info.source == "training" else None

        self.pipeline = Pipeline(Engine(library), [self.sink], clock=self.clock,
                                 detectors=[build_generic(clock=self.clock)], identify=who,
                                 jobs=self.book, detector_mode=mode)
        self._handles: dict[str, int] = {}
        self._framers: dict[int, LineFramer] = {}

    def write(self, path: str, text: str, *, source: str = "training") -> list[Detection]:
        """``text`` (whole lines) read from ``path``, then any deadline now due."""
        handle = self._handles.get(path)
        if handle is None:
            handle = self._handles[path] = self.pipeline.new_handle()
            self.pipeline.open(StreamOpened(handle, StreamInfo(source, path, f"key:{path}")))
            self._framers[handle] = LineFramer()
        data = text.encode() if text.endswith("\n") else (text + "\n").encode()
        found = self.pipeline.process(handle, self._framers[handle].feed(data))
        return found + self.due()

    def due(self) -> list[Detection]:
        """What the runtime's pass delivers after reading: the detectors' due deadlines."""
        deadline = self.pipeline.next_deadline()
        if deadline is not None and deadline <= self.clock.monotonic():
            return self.pipeline.tick()
        return []

    def wait(self, seconds: float) -> list[Detection]:
        self.clock.advance(seconds)
        return self.due()

    def close(self, path: str) -> list[Detection]:
        return self.pipeline.finish(self._handles[path])

    def first_fault(self, job: str, signature: str) -> dict[str, str] | None:
        for family in self.registry.collect():
            for s in family.samples:
                if (s.name == "sigwatch_job_fault_first_seconds"
                        and s.labels.get("job") == job and s.labels["signature"] == signature):
                    return {**s.labels, "value": str(s.value)}
        return None


def tracebacks(found: list[Detection]) -> list[Detection]:
    return [d for d in found if d.signature == "generic_traceback"]


@pytest.fixture(name="node")
def _node(library: PatternSet) -> _Node:
    return _Node(library)


class TestAFinishedTracebackStopsWaitingWhenItsProcessIsReportedEnded:
    @pytest.mark.parametrize("mode", ["chunk", "line"])
    @pytest.mark.parametrize("report", EXIT_REPORTS.values(), ids=EXIT_REPORTS.keys())
    def test_its_jobs_launcher_reporting_a_process_end_delivers_it_at_once(
            self, library: PatternSet, report: str, mode: str) -> None:
        """Rank 3 dies; two seconds later its launcher's report is read from another file:
        the traceback is delivered then, with the report as the evidence of its end, on its
        own stream (rank 3's path, job, rank), its time that of its own line."""
        node = _Node(library, mode=mode)
        assert [] == tracebacks(node.write("/jobs/llm-7/rank3.log", TRACEBACK))
        read_at = node.clock.time()
        node.wait(2.0)

        found = node.write("/jobs/llm-7/launcher.log", report)

        [tb] = [d for d in tracebacks(found) if d.stream_key == "key:/jobs/llm-7/rank3.log"]
        assert ("/jobs/llm-7/rank3.log", "llm-7", "3") == (tb.path, tb.job, tb.rank)
        assert ("ended", report.strip()[:160]) in tb.facts
        assert read_at == tb.time
        assert [] == tracebacks(node.wait(30.0))  # delivered once

    def test_a_report_read_just_before_the_traceback_ends_its_wait_too(
            self, node: _Node) -> None:
        """The launcher's file read first in the same pass (torchrun wrote it after the rank
        died): the traceback read next does not wait for it again."""
        node.write("/jobs/llm-7/launcher.log", TORCHRUN_FAILED)
        node.wait(0.2)

        found = node.write("/jobs/llm-7/rank3.log", TRACEBACK)

        assert ("ended", TORCHRUN_FAILED) in only(found, "generic_traceback").facts

    def test_an_old_report_does_not_speak_for_a_later_traceback(self, node: _Node) -> None:
        """A launcher report a minute old is about an earlier death: the traceback waits."""
        node.write("/jobs/llm-7/launcher.log", TORCHRUN_FAILED)
        node.wait(60.0)

        assert [] == tracebacks(node.write("/jobs/llm-7/rank3.log", TRACEBACK))

    def test_another_jobs_launcher_does_not_end_the_wait(self, node: _Node) -> None:
        """Two jobs on the node: job B's worker failure says nothing of job A's rank."""
        node.write("/jobs/job-a/rank3.log", TRACEBACK)
        node.wait(1.0)

        assert [] == tracebacks(node.write("/jobs/job-b/launcher.log", TORCHRUN_FAILED))
        assert [] == tracebacks(node.wait(8.0))
        assert "job-a" == only(node.wait(1.5), "generic_traceback").job

    def test_with_no_job_the_streams_of_its_source_speak_for_it(self, node: _Node) -> None:
        """Streams without a job: a report on another stream of the same source ends the
        wait; one on another source does not."""
        node.write("/srv/a/train.out", TRACEBACK)

        assert [] == tracebacks(node.write("/srv/x.log", TORCHRUN_FAILED, source="other"))
        assert 1 == len(tracebacks(node.write("/srv/a/launch.err", TORCHRUN_FAILED)))

    def test_a_rank_that_went_on_is_not_made_to_fail_by_its_launcher(
            self, node: _Node) -> None:
        """The rank printed progress after the traceback (it was caught): a report of another
        rank's death does not turn it into a failure."""
        node.write("/jobs/llm-7/rank3.log", TRACEBACK)
        node.write("/jobs/llm-7/rank3.log", "step 1201 | loss 2.3117 | step_time 0.812s")

        found = node.write("/jobs/llm-7/launcher.log", TORCHRUN_FAILED) + node.wait(30.0)

        assert [] == tracebacks(found)

    def test_a_traceback_still_being_read_is_not_cut_short(self, node: _Node) -> None:
        """The report arrives while the rank's frames are being read: the traceback is
        delivered once its exception line is read, whole."""
        cut = '  File "/workspace/llm/data.py"'
        head, tail = TRACEBACK.split(cut)
        node.write("/jobs/llm-7/rank3.log", head)
        assert [] == tracebacks(node.write("/jobs/llm-7/launcher.log", TORCHRUN_FAILED))

        found = node.write("/jobs/llm-7/rank3.log", cut + tail)

        tb = only(found, "generic_traceback")
        assert ("frame", "/workspace/llm/data.py:88 in collate") in tb.captures

    def test_its_stream_closing_ends_the_wait(self, node: _Node) -> None:
        node.write("/jobs/llm-7/rank3.log", TRACEBACK)

        assert 1 == len(tracebacks(node.close("/jobs/llm-7/rank3.log")))


class TestWithNothingToEndIt:
    def test_a_finished_traceback_waits_the_hold_then_fires(self, node: _Node) -> None:
        """A dead rank's traceback that nothing reports on: delivered when the 10 s hold is
        over, with the time its line was read."""
        node.write("/jobs/llm-7/rank3.log", TRACEBACK)
        read_at = node.clock.time()

        assert [] == tracebacks(node.wait(9.5))
        tb = only(node.wait(0.6), "generic_traceback")
        assert read_at == tb.time

    def test_the_hold_fits_in_the_verdicts_settle_time_with_a_scrape_to_spare(self) -> None:
        """The verdict pages a job once its first error is ``settle`` s old; a traceback that
        is that first error (read when it was written) must be delivered and scraped (5 s)
        before then, or the page names no user fault."""
        settle = re.search(r"time\(\) - sigwatch_job:first_error_seconds >= (\d+)",
                           RULES.read_text(encoding="utf-8"))
        assert settle is not None
        scrape = 5.0

        assert GenericSettings().hold_seconds + scrape < float(settle.group(1))


class TestTheFirstFaultTheVerdictReads:
    def test_a_user_exception_on_a_dead_rank_is_the_users_error_at_its_own_time(
            self, node: _Node) -> None:
        """What the verdict needs for a job its own code killed: the rank's traceback as a
        user-owned error, timed when its line was read, not when it was delivered."""
        node.write("/jobs/llm-7/rank3.log", TRACEBACK)
        read_at = node.clock.time()
        node.wait(1.5)
        node.write("/jobs/llm-7/launcher.log", TORCHRUN_FAILED)

        fault = node.first_fault("llm-7", "generic_traceback")

        assert fault is not None
        assert ("3", "user", "error") == (fault["rank"], fault["owner"], fault["severity"])
        assert read_at == float(fault["value"])


def test_the_generic_layers_own_time_is_the_lines_stamp_when_it_has_one(
        node: _Node) -> None:
    """A stamped fatal line: ``line_time`` is its stamp (the first-fault gauge's time)."""
    found = node.write("/jobs/llm-7/rank3.log",
                       "F0323 21:57:05.000000  2103 init.cc:42] Check failed: ptr != nullptr")

    crash = only(found, "generic_native_crash")
    assert crash.line_time is not None
    assert 5.0 == crash.line_time % 60
    assert Severity.ERROR == crash.severity


ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


class TestALaterDetectionIsNeverTheRootCause:
    """The ranking puts a specific signature's detection before a generic one as its root cause
    only if it came before the generic detection's own line (not before its delivery)."""

    def test_torchruns_report_of_the_ranks_death_is_not_the_cause_of_its_traceback(
            self, node: _Node) -> None:
        """The traceback read first, torchrun's exit code 1 two seconds later (delivered
        first): the traceback stays the user's error, with no root cause."""
        node.write("/jobs/llm-7/rank3.log", TRACEBACK)
        node.wait(2.0)

        found = node.write("/jobs/llm-7/launcher.log", TORCHRUN_FAILED)

        assert "torchelastic_worker_exitcode_1" == only(
            found, "torchelastic_worker_exitcode_1").signature
        tb = only(found, "generic_traceback")
        assert (None, Severity.ERROR, "user") == (tb.root_cause, tb.severity, tb.owner)

    def test_nor_when_the_launchers_file_is_read_first_in_the_same_pass(
            self, node: _Node) -> None:
        """Files are read in turn: torchrun's report, written after the traceback, may be
        read a moment before it; it is still the report of that process's end."""
        node.write("/jobs/llm-7/launcher.log", TORCHRUN_FAILED)
        node.wait(0.3)

        tb = only(node.write("/jobs/llm-7/rank3.log", TRACEBACK), "generic_traceback")

        assert (None, Severity.ERROR) == (tb.root_cause, tb.severity)

    def test_a_detection_read_while_the_traceback_waits_is_not_its_root_cause(
            self, node: _Node) -> None:
        """Another rank's ECC error read after the traceback's line, before its hold ended,
        did not lead to it."""
        node.write("/jobs/llm-7/rank3.log", TRACEBACK)
        node.wait(3.0)
        node.write("/jobs/llm-7/rank5.log", ECC)

        tb = only(node.wait(8.0), "generic_traceback")

        assert (None, Severity.ERROR) == (tb.root_cause, tb.severity)

    def test_the_same_detection_read_before_the_traceback_is_its_root_cause(
            self, node: _Node) -> None:
        """The control: read before the traceback's line, the ECC error explains it."""
        node.write("/jobs/llm-7/rank5.log", ECC)
        node.wait(3.0)
        node.write("/jobs/llm-7/rank3.log", TRACEBACK)

        tb = only(node.wait(11.0), "generic_traceback")

        assert tb.root_cause is not None
        assert ("cuda_uncorrectable_ecc", Severity.WARNING) == (tb.root_cause.signature,
                                                                tb.severity)

    @pytest.mark.parametrize(("stamp", "is_cause"), [("21:57:09", False), ("21:57:01", True)],
                             ids=["stamped-after", "stamped-before"])
    def test_where_both_lines_carry_a_stamp_the_stamps_decide(
            self, node: _Node, stamp: str, is_cause: bool) -> None:
        """A backlog read out of order: rank 5's ECC error is read first, but its own stamp
        says whether it came before rank 3's fatal check (stamped 21:57:05)."""
        node.write("/jobs/llm-7/rank5.log",
                   f"E0323 {stamp}.000000  2105 cuda.cc:12] {ECC}")
        node.wait(1.0)

        found = node.write("/jobs/llm-7/rank3.log",
                           "F0323 21:57:05.000000  2103 init.cc:42] Check failed: ptr != nullptr")

        crash = only(found, "generic_native_crash")
        assert is_cause == (crash.root_cause is not None)
