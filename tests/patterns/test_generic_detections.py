"""Generic signatures name failures no specific signature names, and rank below a specific one.

A launcher's exit summary, a scheduler kill or a kernel ``*ERROR*`` line each make a detection
with a clear title; when a specific signature detected the same incident on the stream, it is
named as their root cause and they are less severe. (Tracebacks, signals and glog E/F lines are
the generic layer's: tests/patterns/test_generic_ranking.py and tests/unit/test_generic_*.py.)
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from sigwatch.checks.selftest import detect_text
from sigwatch.model import Severity
from sigwatch.pipeline import Engine

REPO = Path(__file__).resolve().parents[2]


def _generic_causes():  # noqa: ANN202 - a module loaded from bench/
    spec = importlib.util.spec_from_file_location("sigwatch_bench_generic",
                                                  REPO / "bench" / "generic_causes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _only(found, sig_id):  # noqa: ANN001, ANN202
    hits = [d for d in found if d.signature == sig_id]
    assert hits, f"no {sig_id} in {[d.signature for d in found]}"
    return hits[0]


def test_every_generic_signature_names_every_specific_one_as_possible_root_cause() -> None:
    """bench/generic_causes.py --write has been run after the library last changed."""
    assert {} == _generic_causes().stale()


class TestLaunchersAndSchedulers:
    def test_torchrun_summary_names_first_failing_rank_and_exit_code(self, library) -> None:
        """The Root Cause block's rank and exit code are captured."""
        text = ("Root Cause (first observed failure):\n"
                "[0]:\n"
                "  time      : 2025-05-21_15:43:03\n"
                "  host      : worker-7\n"
                "  rank      : 12 (local_rank: 4)\n"
                "  exitcode  : -9 (pid: 14750)\n"
                "  error_file: <N/A>\n")

        d = _only(detect_text(Engine(library), text), "torchelastic_root_cause_summary")

        assert ("rank", "12") in d.captures
        assert ("exitcode", "-9") in d.captures

    def test_slurm_time_limit_supersedes_the_generic_cancel_banner(self, library) -> None:
        """One incident, one detection: the time limit, with its fix."""
        text = ("slurmstepd: error: *** JOB 3884617 ON node023 CANCELLED AT "
                "2018-08-19T16:30:21 DUE TO TIME LIMIT ***\n")

        ids = {d.signature for d in detect_text(Engine(library), text)}

        assert ids == {"slurm_job_cancelled_time_limit"}

    def test_mpirun_signal_report_captures_the_rank(self, library) -> None:
        """mpirun's 'exited on signal' line names the rank that died."""
        text = ("mpirun noticed that process rank 5 with PID 2233 on node gpu-3 exited on "
                "signal 9 (Killed).\n")

        d = _only(detect_text(Engine(library), text), "mpi_process_exited_on_signal")

        assert ("rank", "5") in d.captures
        assert ("signal", "9") in d.captures


class TestNativeAndKernelErrorLines:
    def test_tensorflow_duplicate_factory_registration_is_quiet(self, library) -> None:
        """The well-known benign E lines of TensorFlow start-up are not errors."""
        text = ("2024-03-30 14:29:58.691384: E external/local_xla/xla/stream_executor/cuda/"
                "cuda_dnn.cc:9261] Unable to register cuDNN factory: Attempting to register "
                "factory for plugin cuDNN when one has already been registered\n")

        found = detect_text(Engine(library), text)

        assert [] == [d.signature for d in found if d.severity >= Severity.WARNING]

    def test_display_fifo_underrun_is_quiet(self, library) -> None:
        """i915's *ERROR* FIFO underrun is display noise, not a GPU compute failure."""
        text = "i915 0000:00:02.0: [drm] *ERROR* CPU pipe A FIFO underrun\n"

        assert [] == detect_text(Engine(library), text)

    def test_amdgpu_error_line_after_ring_timeout_names_it(self, library) -> None:
        """A driver *ERROR* after a ring timeout is fallout of the hang."""
        text = ("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled "
                "seq=228661, emitted seq=228662\n"
                "[drm:gfx_v10_0_hw_fini [amdgpu]] *ERROR* KGQ disable failed\n")

        found = detect_text(Engine(library), text)
        later = [d for d in found if d.signature == "kernel_gpu_driver_error_line"
                 and "KGQ" in d.text]

        assert later and later[0].root_cause is not None
        assert later[0].root_cause.signature == "rocm_amdgpu_ring_timeout"


class TestOneKernelEventOverSeveralLines:
    """The OOM killer's report (``invoked oom-killer``, the memory and task dumps,
    ``oom-kill:constraint=``, ``Killed process``) is one event: one detection (issue 21)."""

    REPORT = (
        "[2059991.401102] python3 invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), "
        "order=0, oom_score_adj=0\n"
        "[2059991.401110] CPU: 12 PID: 25315 Comm: python3 Tainted: P           OE\n"
        "[2059991.401190] Mem-Info:\n"
        "[2059991.401201] active_anon:7862864 inactive_anon:12 isolated_anon:0\n"
        + "".join(f"[2059991.4913{i:02d}] [  {25300 + i}]     0 {25300 + i}  13328061  7862864 "
                  "63160320        0             0 python3\n" for i in range(60))
        + "[2059991.491436] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
        "mems_allowed=0,global_oom,task_memcg=/user.slice,task=python3,pid=25315,uid=0\n"
        "[2059991.491542] Out of memory: Killed process 25315 (python3) total-vm:53312244kB, "
        "anon-rss:31451456kB, file-rss:74816kB, shmem-rss:12296kB, UID:0 pgtables:69068kB "
        "oom_score_adj:0\n")

    def test_the_report_is_one_detection_on_the_killed_process_line(self, library) -> None:
        found = [d for d in detect_text(Engine(library), self.REPORT)
                 if d.signature == "host_oom_killer"]

        [d] = found
        assert "Killed process 25315 (python3)" in (d.text or "")
        assert {("pid", "25315"), ("process", "python3"),
                ("constraint", "CONSTRAINT_NONE")} <= set(d.captures)
        assert any("invoked oom-killer" in c for c in d.context)
        assert any("oom-kill:constraint=" in c for c in d.context)

    def test_two_kills_are_two_detections(self, library) -> None:
        found = [d for d in detect_text(Engine(library), self.REPORT + self.REPORT)
                 if d.signature == "host_oom_killer"]

        assert 2 == len(found)

    def test_a_report_cut_after_its_first_line_is_still_detected(self, library) -> None:
        """A paste (or a ring buffer) holding only the first line of the report."""
        text = ("May  1 21:13:05 dev-VirtualBox kernel: [ 4563.079551] memory-hog-2048 invoked "
                "oom-killer: gfp_mask=0x2084d0, order=0, oom_score_adj=0\n"
                "May  1 21:13:06 dev-VirtualBox kernel: [ 4563.079821] Mem-Info:\n")

        found = [d for d in detect_text(Engine(library), text)
                 if d.signature == "host_oom_killer"]

        assert 1 == len(found)
