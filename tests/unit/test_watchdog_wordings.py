"""Every wording of PyTorch's NCCL watchdog (``ProcessGroupNCCL.cpp``) read into rank facts.

Each test names the release that printed the wording; the lines are shaped as those releases
print them (``c10::str`` in ``WorkNCCL``'s ``operator<<``, ``logPrefix()``, the watchdog loop).
"""

from __future__ import annotations

import pytest

from sigwatch.detectors.ranks import WatchdogReport, parse_watchdog


class TestTimedOutWork:
    def test_pytorch_1_7_blocking_wait_without_sequence_numbers(self) -> None:
        """1.7 (torch/lib/c10d): ``synchronize`` with NCCL_BLOCKING_WAIT; OpType and the
        output's TensorShape, no SeqNum yet."""
        line = ("[Rank 0] Caught collective operation timeout for work: WorkNCCL("
                "OpType=BROADCAST, TensorShape=[1024, 1024], Timeout(ms)=1800000)")

        assert WatchdogReport({}, True, "BROADCAST", "0", "") == parse_watchdog(line)

    def test_pytorch_1_8_watchdog_with_tensor_shape(self) -> None:
        """1.8 to 1.9: the cleanup watchdog's wording, still without SeqNum."""
        line = ("[Rank 12] Watchdog caught collective operation timeout: WorkNCCL("
                "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600011 milliseconds before "
                "timing out.")

        assert WatchdogReport({}, True, "ALLREDUCE", "12", "") == parse_watchdog(line)

    def test_pytorch_1_10_sequence_number_and_tensor_shape(self) -> None:
        """1.10 to 1.12: ``WorkNCCL(SeqNum=.., OpType=.., TensorShape=.., Timeout(ms)=..)``."""
        line = ("[E ProcessGroupNCCL.cpp:587] [Rank 1] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=4565, OpType=ALLREDUCE, TensorShape=[25557032], "
                "Timeout(ms)=600000) ran for 600391 milliseconds before timing out.")

        assert WatchdogReport({"timed_out": 4565}, True, "ALLREDUCE", "1", "") == \
            parse_watchdog(line)

    def test_pytorch_2_0_numel_in_and_out(self) -> None:
        """1.13 and every 2.x: ``NumelIn``/``NumelOut`` replace the shape."""
        line = ("[rank3]:[E219 08:58:32.606233339 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog "
                "caught collective operation timeout: WorkNCCL(SeqNum=31, OpType=ALLREDUCE, "
                "NumelIn=117440512, NumelOut=117440512, Timeout(ms)=600000) ran for 600031 "
                "milliseconds before timing out.")

        assert WatchdogReport({"timed_out": 31}, True, "ALLREDUCE", "3", "") == \
            parse_watchdog(line)

    def test_an_nccl_error_on_a_work_is_reported_like_a_timeout(self) -> None:
        """2.x: an asynchronous NCCL error names the failed work the same way."""
        line = ("[Rank 0] Collective WorkNCCL(SeqNum=89, OpType=ALLREDUCE, NumelIn=67108864, "
                "NumelOut=67108864, Timeout(ms)=90000) raised the following async exception: "
                "NCCL error: remote process exited or there was a network error")

        assert WatchdogReport({"timed_out": 89}, True, "ALLREDUCE", "0", "") == \
            parse_watchdog(line)


class TestEnqueuedAndCompleted:
    def test_pytorch_2_2_timeout_at_nccl_work(self) -> None:
        """2.2: the desync report after a timeout, with ``[Rank N]`` only."""
        line = ("[Rank 7] Timeout at NCCL work: 1234, last enqueued NCCL work: 1234, "
                "last completed NCCL work: 1233.")

        assert WatchdogReport({"timed_out": 1234, "last_enqueued": 1234,
                               "last_completed": 1233}, True, None, "7", "") == \
            parse_watchdog(line)

    def test_pytorch_2_3_process_group_in_the_prefix(self) -> None:
        """2.3: ``logPrefix()`` is ``[PG <id> Rank <rank>]``."""
        line = ("[rank1]:[E ProcessGroupNCCL.cpp:1540] [PG 1 Rank 1] Timeout at NCCL work: 7, "
                "last enqueued NCCL work: 8, last completed NCCL work: 6.")

        assert WatchdogReport({"timed_out": 7, "last_enqueued": 8, "last_completed": 6},
                              True, None, "1", "1") == parse_watchdog(line)

    def test_pytorch_2_3_garbage_completed_figure_is_dropped(self) -> None:
        """2.3 printed an uninitialised ``last completed`` when nothing had completed."""
        line = ("[PG 0 Rank 2] Timeout at NCCL work: 1, last enqueued NCCL work: 1, "
                "last completed NCCL work: 76280750235782912.")

        assert {"timed_out": 1, "last_enqueued": 1} == parse_watchdog(line).seqs

    def test_pytorch_2_4_exception_detected_by_watchdog_with_the_group_description(
            self) -> None:
        """2.4: ``[PG 0 (default_pg) Rank N]`` and the "either an error or timeout" line."""
        line = ("[rank1]:[E1003 18:37:01.833575187 ProcessGroupNCCL.cpp:1664] [PG 0 "
                "(default_pg) Rank 1] Exception (either an error or timeout) detected by "
                "watchdog at work: 6463, last enqueued NCCL work: 6463, last completed NCCL "
                "work: 6462.")

        assert WatchdogReport({"timed_out": 6463, "last_enqueued": 6463,
                               "last_completed": 6462}, True, None, "1", "0") == \
            parse_watchdog(line)

    def test_pytorch_2_5_group_id_and_guid(self) -> None:
        """2.5 on: ``[PG ID <id> PG GUID <guid>(<desc>) Rank N]``."""
        line = ("[rank2]:[E1109 16:13:20.222705810 ProcessGroupNCCL.cpp:1785] [PG ID 1 PG GUID "
                "1 Rank 2] Exception (either an error or timeout) detected by watchdog at work: "
                "500045, last enqueued NCCL work: 500047, last completed NCCL work: 500044.")

        assert WatchdogReport({"timed_out": 500045, "last_enqueued": 500047,
                               "last_completed": 500044}, True, None, "2", "1") == \
            parse_watchdog(line)

    @pytest.mark.parametrize("what", ["Work timeout is", "NCCL error is"])
    def test_pytorch_2_6_timeout_and_error_worded_apart(self, what: str) -> None:
        """2.6 on: the watchdog says which of the two it detected."""
        line = (f"[PG ID 0 PG GUID 0(default_pg) Rank 5] {what} detected by watchdog at work: "
                "20589, last enqueued NCCL work: 20589, last completed NCCL work: 20584.")

        assert WatchdogReport({"timed_out": 20589, "last_enqueued": 20589,
                               "last_completed": 20584}, True, None, "5", "0") == \
            parse_watchdog(line)


class TestRanksThatDidNotTimeOut:
    def test_pytorch_2_3_global_timeout_from_another_rank(self) -> None:
        """2.3: the heartbeat monitor of a rank told through the store."""
        line = ("[PG 0 Rank 4] Received a global timeout from another rank and will start to "
                "dump the debug info. Last enqueued NCCL work: 56115, last completed NCCL work: "
                "56115.")

        assert WatchdogReport({"last_enqueued": 56115, "last_completed": 56115}, False, None,
                              "4", "0") == parse_watchdog(line)

    def test_pytorch_2_4_dump_signal_from_another_rank(self) -> None:
        """2.4 on: how far a rank that did not time out got: the lagging rank is behind."""
        line = ("[rank5]:[E703 17:54:18.884528282 ProcessGroupNCCL.cpp:1987] [PG ID 0 PG GUID "
                "0(default_pg) Rank 5] Received a dump signal due to a collective timeout from  "
                "rank 7 and we will try our best to dump the debug info. Last enqueued NCCL "
                "work: 56116, last completed NCCL work: 56116.This is most likely caused by "
                "incorrect usages of collectives")

        assert WatchdogReport({"last_enqueued": 56116, "last_completed": 56116}, False, None,
                              "5", "0") == parse_watchdog(line)

    def test_a_later_backend_neutral_wording(self) -> None:
        """Later releases print the backend's name in place of NCCL (``getBackendName()``)."""
        line = ("[PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a "
                "collective timeout from this local rank and we will try our best to dump the "
                "debug info. Last enqueued XCCL work: 39892, last completed XCCL work: 39891.")

        assert {"last_enqueued": 39892, "last_completed": 39891} == parse_watchdog(line).seqs

    def test_nothing_enqueued_is_minus_one(self) -> None:
        line = ("[PG ID 0 PG GUID 0(default_pg) Rank 0] Received a dump signal due to a "
                "collective timeout from this local rank and we will try our best to dump the "
                "debug info. Last enqueued NCCL work: -1, last completed NCCL work: -1.")

        assert {"last_enqueued": -1, "last_completed": -1} == parse_watchdog(line).seqs


class TestNotWatchdogLines:
    @pytest.mark.parametrize("line", [
        "[Rank 0] Some NCCL operations have failed or timed out. Due to the asynchronous "
        "nature of CUDA kernels, subsequent GPU operations might run on corrupted data.",
        "[PG ID 0 PG GUID 0(default_pg) Rank 5] Observed flight recorder dump signal from "
        "another rank via TCPStore.",
        "iteration 4100/ 10000 | elapsed time per iteration (ms): 812.3 | lm loss: 2.31 |",
        "the docs say: Watchdog caught collective operation timeout means a rank hung",
    ])
    def test_other_lines_report_nothing(self, line: str) -> None:
        assert parse_watchdog(line) is None
