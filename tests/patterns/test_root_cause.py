"""Root cause over collateral: fallout is lower severity and names the root cause in the log."""

from __future__ import annotations

import pytest

from sigwatch.checks.selftest import detect_text
from sigwatch.pipeline import Engine

CASES = {
    "ecc_then_sigterm_fanout": (
        "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812914 closing "
        "signal SIGTERM\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812915 closing "
        "signal SIGTERM\n",
        "cuda_uncorrectable_ecc", "torchelastic_sigterm_fanout"),
    "xid79_then_xid45": (
        "May 18 19:02:39 node7 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the "
        "bus.\n"
        "May 18 19:02:40 node7 kernel: NVRM: Xid (PCI:0000:2b:00): 45, pid=1818990, "
        "name=python3, Ch 00000001\n",
        "nvidia_xid_79_fallen_off_bus", "nvidia_xid_45_preemptive_cleanup"),
    "watchdog_then_nccl_abort": (
        "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=4661191"
        "68, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing "
        "out.\n"
        "[rank0]:[E321 02:07:08.409 ProcessGroupNCCL.cpp:537] Some NCCL operations have failed "
        "or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations "
        "might run on corrupted/incomplete data.\n",
        "nccl_watchdog_timeout", "nccl_operations_failed_abort"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fallout_names_the_root_cause_and_ranks_below_it(library, case: str) -> None:
    """Every fallout detection points at the root-cause detection and is less severe."""
    text, root_id, fallout_id = CASES[case]

    found = detect_text(Engine(library), text)

    roots = [d for d in found if d.signature == root_id]
    fallout = [d for d in found if d.signature == fallout_id]
    assert roots and fallout
    assert {root_id} == {d.root_cause.signature for d in fallout if d.root_cause}
    assert all(d.root_cause is not None for d in fallout)
    assert all(d.severity < roots[0].severity for d in fallout)
