"""Jobs on a node: identity on detections, kernel faults shared by the jobs active then, the
facts to compare ranks, and gauges that exist only while their job is active."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.fleet import FleetNode

from sigwatch.clock import FakeClock
from sigwatch.detectors.jobs import JobLimits

XID = ("NVRM: Xid (PCI:0000:8a:00): 79, pid=2412, name=python, GPU has fallen off the bus.")
TIMEOUT = ("[rank{r}]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog "
           "caught collective operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, "
           "NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800017 milliseconds before "
           "timing out.")
AT_WORK = ("[rank{r}]:[E1003 18:37:01.833575187 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) "
           "Rank {r}] Exception (either an error or timeout) detected by watchdog at work: "
           "6463, last enqueued NCCL work: {enq}, last completed NCCL work: {done}.")
STEP = "iteration {step}/ 10000 | elapsed time per iteration (ms): {ms} | lm loss: 2.31 |"


@pytest.fixture(name="node")
def _node(tmp_path: Path) -> FleetNode:
    return FleetNode(tmp_path)


class TestIdentityOnDetections:
    def test_a_detection_carries_the_job_and_rank_of_its_path(self, node: FleetNode) -> None:
        h = node.open("/training/llama-4471203/rank17.log")

        [d] = node.write(h, "ZeroDivisionError: division by zero")

        assert (("llama-4471203",), "17") == (d.jobs, d.rank)
        assert "llama-4471203" == d.to_json()["job"]

    def test_a_launcher_prefix_names_the_rank_of_the_line(self, node: FleetNode) -> None:
        """A job log with every rank in it: ``[rank5]:`` is more specific than the path."""
        h = node.open("/training/llama-4471203/rank0.log")

        [d] = node.write(h, "[rank5]: ZeroDivisionError: division by zero")

        assert "5" == d.rank


class TestKernelFaultsBelongToTheActiveJobs:
    def test_every_job_running_when_the_fault_is_read_gets_it(self, node: FleetNode) -> None:
        a = node.open("/training/job-a/rank0.log")
        b = node.open("/training/job-b/rank3.log")
        node.write(a, "step 1 starting")
        node.write(b, "step 1 starting")
        kernel = node.open("/dev/kmsg", source="kernel")

        [d] = node.write(kernel, XID, time=1_699_999_900.0)  # its own time, before reading

        assert ("job-a", "job-b") == d.jobs
        for job in ("job-a", "job-b"):
            assert 1_699_999_900.0 == node.gauge(
                "sigwatch_job_fault_first_seconds", job=job, rank="", signature="test_xid_79",
                owner="node", severity="critical")

    def test_a_job_whose_streams_closed_before_the_fault_does_not_get_it(
            self, node: FleetNode) -> None:
        done = node.open("/training/finished/rank0.log")
        node.write(done, "training complete")
        node.close(done)
        running = node.open("/training/running/rank0.log")
        node.write(running, "step 7")
        kernel = node.open("/dev/kmsg", source="kernel")

        [d] = node.write(kernel, XID)

        assert ("running",) == d.jobs

    def test_a_job_that_has_written_nothing_yet_is_not_active(self, node: FleetNode) -> None:
        """Logs left on disk by jobs long gone are followed too; they are not running."""
        node.open("/training/old-job/rank0.log")
        kernel = node.open("/dev/kmsg", source="kernel")

        [d] = node.write(kernel, XID)

        assert () == d.jobs
        assert [] == node.series("sigwatch_job_active")


class TestFirstFaults:
    def test_the_first_fault_of_a_signature_keeps_its_own_time_rank_line_and_fix(
            self, node: FleetNode) -> None:
        h = node.open("/training/job-a/rank3.log")
        node.write(h, "2023-11-14T22:13:20Z ZeroDivisionError: division by zero")
        node.write(h, "2023-11-14T22:15:00Z ZeroDivisionError: again\x1b[0m")

        [info] = node.series("sigwatch_job_fault_info")

        assert 1_699_999_999.0 < node.gauge(
            "sigwatch_job_fault_first_seconds", job="job-a", rank="3",
            signature="test_user_exception", owner="user", severity="error") < 1_700_000_001.0
        assert "2023-11-14T22:13:20Z ZeroDivisionError: division by zero" == info["line"]
        assert "Fix the training code." == info["fix"]

    @pytest.mark.parametrize("now", [1_700_000_000.0, 1_700_000_000.0 + 3 * 86400],
                             ids=["2023", "three-days-on"])
    def test_a_stamp_without_a_year_takes_the_year_of_the_daemons_clock_not_the_machines(
            self, tmp_path: Path, now: float, monkeypatch: pytest.MonkeyPatch) -> None:
        """glog and syslog stamps carry no year: it comes from the clock the daemon was given
        (a simulation, a replay, a test), never from the machine's wall clock, which would put
        a 2023 line in the machine's year (or, a few days off, last year) and make it the
        job's first fault by a year."""
        monkeypatch.setenv("TZ", "UTC")  # a glog stamp is in the node's zone
        time.tzset()
        node = FleetNode(tmp_path, clock=FakeClock(now))
        h = node.open("/training/job-a/rank3.log")
        node.write(h, "E1114 22:13:19.000000  4242 train.cc:12] ZeroDivisionError: division by "
                      "zero")

        assert 1_699_999_999.0 == node.gauge(
            "sigwatch_job_fault_first_seconds", job="job-a", rank="3",
            signature="test_user_exception", owner="user", severity="error")

    @pytest.mark.parametrize(("stamp", "expected"), [
        ("2023-11-14T23:13:20Z", 1_700_000_000.0),   # an hour ahead: when it was read
        ("2023-11-14T22:13:50Z", 1_700_000_030.0),   # 30 s ahead (clock skew): its own time
    ], ids=["an-hour-ahead", "seconds-ahead"])
    def test_a_fault_stamped_far_ahead_of_the_daemons_clock_counts_from_its_reading(
            self, node: FleetNode, stamp: str, expected: float) -> None:
        """The verdict waits until a job's first error is 20 s old: a line from a node whose
        clock is an hour ahead would hold the page back for an hour. More than a minute
        ahead of its reading, a fault counts from when it was read."""
        h = node.open("/training/job-a/rank3.log")
        node.write(h, f"{stamp} ZeroDivisionError: division by zero")

        assert expected == node.gauge(
            "sigwatch_job_fault_first_seconds", job="job-a", rank="3",
            signature="test_user_exception", owner="user", severity="error")

    def test_the_line_label_is_cut_and_free_of_control_characters(
            self, node: FleetNode) -> None:
        h = node.open("/training/job-a/rank3.log")
        node.write(h, "ZeroDivisionError: \x1b[31m" + "x" * 500)

        [info] = node.series("sigwatch_job_fault_info")

        assert 200 == len(info["line"])
        assert not any(ord(c) < 32 for c in info["line"])


class TestFalloutWithinItsJob:
    def test_a_cause_in_another_job_does_not_make_a_failure_collateral(
            self, node: FleetNode) -> None:
        """Two jobs on one node: job B's failure is its own, not fallout of job A's."""
        a = node.open("/training/job-a/rank0.log")
        b = node.open("/training/job-b/rank0.log")
        node.write(a, "ZeroDivisionError: in job a")

        [b_failed] = node.write(b, "torch.distributed.elastic...ChildFailedError: rank 0")
        [a_failed] = node.write(a, "torch.distributed.elastic...ChildFailedError: rank 0")

        assert (None, "error") == (b_failed.root_cause, b_failed.severity.label)
        assert a_failed.root_cause is not None
        assert "warning" == a_failed.severity.label

    def test_the_first_fault_gauge_carries_the_severity_as_delivered(
            self, node: FleetNode) -> None:
        """Collateral lowered to a warning is labelled a warning: rules that start a job's
        incident on its first error do not start it on fallout."""
        a = node.open("/training/job-a/rank0.log")
        node.write(a, "ZeroDivisionError: boom", "ChildFailedError: rank 0")

        severities = {s["signature"]: s["severity"]
                      for s in node.series("sigwatch_job_fault_first_seconds")}

        assert {"test_user_exception": "error", "test_child_failed": "warning"} == severities


class TestRankFacts:
    def test_watchdog_figures_per_rank_and_process_group(self, node: FleetNode) -> None:
        """2.4's two lines of one timeout (the first without the group) are one report."""
        for rank, enq, done in ((0, 6463, 6462), (1, 6462, 6462)):
            h = node.open(f"/training/job-a/rank{rank}.log")
            node.write(h, TIMEOUT.format(r=rank), AT_WORK.format(r=rank, enq=enq, done=done))

        def seq(rank: str, kind: str) -> float | None:
            return node.gauge("sigwatch_job_rank_collective_seq", job="job-a", rank=rank,
                              pg="0", kind=kind)

        assert (6463, 6463, 6462) == (seq("0", "timed_out"), seq("0", "last_enqueued"),
                                      seq("0", "last_completed"))
        assert 6462 == seq("1", "last_enqueued")  # rank 1 never enqueued 6463: it lags
        assert {"0"} == {s["pg"] for s in node.series("sigwatch_job_rank_collective_seq")}
        [report, _] = node.series("sigwatch_job_rank_collective_report_seconds")
        assert "ALLREDUCE" == report["op"]

    def test_progress_per_rank(self, node: FleetNode) -> None:
        h = node.open("/training/job-a/rank2.log")
        node.write(h, STEP.format(step=4100, ms=812.5), STEP.format(step=4101, ms=1500.0))

        assert 4101 == node.gauge("sigwatch_job_rank_step", job="job-a", rank="2")
        assert 1.5 == node.gauge("sigwatch_job_rank_step_seconds", job="job-a", rank="2")
        assert node.gauge("sigwatch_job_rank_last_progress_seconds", job="job-a",
                          rank="2") is not None

    def test_progress_the_whole_chunk_pass_reads_reaches_the_book(self, node: FleetNode) -> None:
        """Megatron's full iteration line is read by the progress prepass (not line by line):
        the book gets its figures all the same, the last step and its step time, and the
        last per-line record when it comes after (a shorter line the prepass does not take)."""
        h = node.open("/training/job-a/rank3.log")
        full = (" [2024-06-02 23:13:26] iteration {step}/  500000 | consumed samples:  2048 | "
                "elapsed time per iteration (ms): {ms} | learning rate: 2.757402E-04 | global "
                "batch size:  1024 | lm loss: 6.477215E+00 | loss scale: 1.0 | grad norm: 0.563 |"
                " number of skipped iterations:   0 | number of nan iterations:   0 |")
        node.write(h, full.format(step=7, ms="3930.2"), full.format(step=8, ms="2219.0"))

        assert 8 == node.gauge("sigwatch_job_rank_step", job="job-a", rank="3")
        assert 2.219 == node.gauge("sigwatch_job_rank_step_seconds", job="job-a", rank="3")

        node.write(h, full.format(step=9, ms="2000.0"), STEP.format(step=10, ms=1500.0),
                   full.format(step=11, ms="1800.0"), STEP.format(step=12, ms=1700.0))

        assert 12 == node.gauge("sigwatch_job_rank_step", job="job-a", rank="3")
        assert 1.7 == node.gauge("sigwatch_job_rank_step_seconds", job="job-a", rank="3")

    def test_the_last_of_many_prepass_records_in_one_chunk_wins(self, node: FleetNode) -> None:
        """Several ranks' full iteration lines in one read: each rank's gauges are its last
        line's, the per-line records between them taken in their place."""
        h = node.open("/training/job-a/rank0.log")
        full = ("[rank{r}]: [2024-06-02 23:13:26] iteration {step}/  500000 | consumed samples:  "
                "2048 | elapsed time per iteration (ms): {ms} | learning rate: 2.757402E-04 | "
                "global batch size:  1024 | lm loss: 6.477215E+00 | loss scale: 1.0 | grad norm:"
                " 0.563 | number of skipped iterations:   0 | number of nan iterations:   0 |")
        node.write_block(h, *(full.format(r=r, step=step, ms=f"{1000 + 10 * step + r}.0")
                              for step in range(20, 26) for r in (0, 1)),
                         "[rank1]: " + STEP.format(step=26, ms=1700.0))

        assert 25 == node.gauge("sigwatch_job_rank_step", job="job-a", rank="0")
        assert 1.25 == node.gauge("sigwatch_job_rank_step_seconds", job="job-a", rank="0")
        assert 26 == node.gauge("sigwatch_job_rank_step", job="job-a", rank="1")
        assert 1.7 == node.gauge("sigwatch_job_rank_step_seconds", job="job-a", rank="1")

    def test_streams_without_a_job_give_no_job_gauges(self, node: FleetNode) -> None:
        h = node.open("/somewhere/else.log")
        node.write(h, STEP.format(step=1, ms=800.0), TIMEOUT.format(r=0))

        assert [] == node.series("sigwatch_job_rank_step")

    def test_caps_refuse_and_count_instead_of_growing(self, tmp_path: Path) -> None:
        node = FleetNode(tmp_path, limits=JobLimits(jobs=1, ranks=2, pgs=1))
        for rank in range(3):
            h = node.open(f"/training/job-a/rank{rank}.log")
            node.write(h, STEP.format(step=1, ms=800.0))
        other = node.open("/training/job-b/rank0.log")
        node.write(other, STEP.format(step=1, ms=800.0))

        assert 2 == len(node.series("sigwatch_job_rank_step"))
        assert ["job-a"] == [s["job"] for s in node.series("sigwatch_job_active")]
        refused = node.registry.get_sample_value
        assert 1 == refused("sigwatch_job_series_refused_total", {"what": "rank"})
        assert 1 == refused("sigwatch_job_series_refused_total", {"what": "job"})


class TestGaugesOfAJobThatEnded:
    @staticmethod
    def _busy_job(node: FleetNode) -> int:
        h = node.open("/training/job-a/rank0.log")
        node.write(h, STEP.format(step=10, ms=800.0), TIMEOUT.format(r=0),
                   "ZeroDivisionError: division by zero")
        assert node.series("sigwatch_job_active")
        assert node.series("sigwatch_job_fault_first_seconds")
        assert node.series("sigwatch_job_rank_collective_seq")
        return h

    @staticmethod
    def _nothing_left(node: FleetNode) -> None:
        for name in ("sigwatch_job_active", "sigwatch_job_fault_first_seconds",
                     "sigwatch_job_fault_info", "sigwatch_job_rank_step",
                     "sigwatch_job_rank_collective_seq",
                     "sigwatch_job_rank_collective_report_seconds"):
            assert [] == node.series(name), name

    def test_are_dropped_when_its_last_stream_closes(self, node: FleetNode) -> None:
        h = self._busy_job(node)

        node.close(h)

        self._nothing_left(node)

    def test_are_dropped_when_it_stays_idle(self, tmp_path: Path) -> None:
        node = FleetNode(tmp_path, idle=600.0)
        self._busy_job(node)

        node.advance(599.0)
        assert node.series("sigwatch_job_active")
        node.advance(2.0)

        self._nothing_left(node)

    def test_a_job_that_writes_again_is_active_again(self, tmp_path: Path) -> None:
        node = FleetNode(tmp_path, idle=600.0)
        h = self._busy_job(node)
        node.advance(601.0)

        node.write(h, STEP.format(step=11, ms=800.0))

        assert 11 == node.gauge("sigwatch_job_rank_step", job="job-a", rank="0")
        assert [] == node.series("sigwatch_job_fault_first_seconds")  # a new life
