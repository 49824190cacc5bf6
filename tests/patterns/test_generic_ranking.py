"""The generic layer ranks below the signature library.

A specific signature that detects the same failure stays the root cause: on the same line it
folds a generic crash, record or check away (one line, one detection), and makes a traceback
detection its fallout (a warning that still names the user's frame); earlier on the source it
becomes the generic detection's root cause. A signature later on the stream is not what led to
a line, so it is never named.
"""

from __future__ import annotations

from support.generic import generic_scan, only, text_of

from sigwatch.app import build_generic
from sigwatch.clock import FakeClock
from sigwatch.framing.lines import LineFramer
from sigwatch.model import Severity, StreamInfo
from sigwatch.patterns.compiled import PatternSet
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.sinks.base import CollectingSink
from sigwatch.sources.base import StreamOpened


class TestSpecificSignatureStaysTheRootCause:
    def test_a_traceback_ending_in_a_known_failure_is_its_fallout_and_names_the_frame(
            self, library: PatternSet) -> None:
        """A CUDA OOM ends the traceback: cuda_out_of_memory is the error, the traceback a
        warning naming it as root cause and the user's frame it happened in."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/job/train.py", line 40, in <module>
                loss.backward()
            torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.12 GiB is free.
            '''), library=library)

        specific = only(found, "cuda_out_of_memory")
        generic = only(found, "generic_traceback")
        assert Severity.ERROR == specific.severity
        assert Severity.WARNING == generic.severity
        assert generic.root_cause is not None
        assert "cuda_out_of_memory" == generic.root_cause.signature
        assert ("frame", "/job/train.py:40 in <module>") in generic.captures

    def test_a_generic_signature_on_the_exception_line_is_named_too(
            self, library: PatternSet) -> None:
        """An XLA status error ends the traceback: the library's status signature leads."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/srv/run.py", line 3, in <module>
                step(state, batch)
            jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4770354232 bytes.
            '''), library=library)

        generic = only(found, "generic_traceback")
        assert generic.root_cause is not None
        assert generic.root_cause.signature.startswith("xla_runtime_error")

    def test_an_earlier_specific_detection_becomes_the_root_cause(
            self, library: PatternSet) -> None:
        """An uncorrectable ECC error, then the job's own exception: the ECC error is the root
        cause, the traceback a warning."""
        found = generic_scan(text_of('''
            [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered
            Traceback (most recent call last):
              File "/job/launch.py", line 20, in <module>
                wait_all(workers)
            RuntimeError: worker 1 stopped
            '''), library=library)

        generic = only(found, "generic_traceback")
        assert generic.root_cause is not None
        assert "cuda_uncorrectable_ecc" == generic.root_cause.signature
        assert Severity.WARNING == generic.severity

    def test_the_shells_kill_after_the_oom_killer_is_the_same_crash(
            self, library: PatternSet) -> None:
        """'Killed' right after the kernel's OOM kill is not a second crash."""
        found = generic_scan(text_of('''
            [ 4018.450000] Out of memory: Killed process 935 (python) total-vm:113656kB, anon-rss:102104kB, file-rss:0kB, shmem-rss:0kB
            Killed
            '''), library=library)

        assert ["host_oom_killer"] == [d.signature for d in found
                                       if d.severity >= Severity.WARNING]

class TestOneLineOneDetection:
    def test_a_record_the_library_names_is_folded_into_the_signature(
            self, library: PatternSet) -> None:
        """An NCCL glog E line: nccl_error with its fix, no generic record beside it."""
        found = generic_scan(
            "E1120 12:00:00.123456  1234 ProcessGroupNCCL.cpp:616] [Rank 0] NCCL watchdog thread "
            "terminated with exception: NCCL error: remote process exited or there was a network "
            "error, NCCL version 2.18.1\n", library=library)

        assert ["nccl_error"] == [d.signature for d in found]

    def test_a_known_benign_line_stays_information_only(self, library: PatternSet) -> None:
        """A signature that rates a line info keeps the generic layer from raising it."""
        found = generic_scan("[drm] *ERROR* CPU pipe A FIFO underrun\n", library=library)

        assert [] == [d for d in found if d.severity >= Severity.WARNING]


class TestOnlyWhatCameBefore:
    def test_a_specific_detection_later_on_the_stream_is_not_the_root_cause(
            self, library: PatternSet) -> None:
        """A traceback, then (later) an unrelated ECC line: the traceback keeps its severity."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/job/data.py", line 12, in load
                rows = parse(blob)
            ValueError: malformed record 17
            epoch 1 done
            step 9 done
            NVRM: Xid (PCI:0000:3b:00): 48, pid=1234, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.
            '''), library=library)

        generic = only(found, "generic_traceback")
        assert generic.root_cause is None
        assert Severity.ERROR == generic.severity

    def test_no_signature_no_root_cause(self) -> None:
        """Alone, the generic layer names no root cause and keeps its own severity."""
        found = generic_scan("Segmentation fault (core dumped)\n", library=PatternSet(()))

        crash = only(found, "generic_native_crash")
        assert (None, Severity.ERROR) == (crash.root_cause, crash.severity)

    def test_a_specific_detection_in_another_job_is_not_the_root_cause(
            self, library: PatternSet) -> None:
        """Two jobs on one node, one source: job A's ECC error explains nothing of job B."""
        clock = FakeClock()
        sink = CollectingSink()
        pipeline = Pipeline(Engine(library), [sink], clock=clock,
                            detectors=[build_generic(clock=clock)])
        streams = {"job-a": "RuntimeError: CUDA error: uncorrectable ECC error encountered\n",
                   "job-b": text_of('''
                       Traceback (most recent call last):
                         File "/job/launch.py", line 20, in <module>
                           wait_all(workers)
                       RuntimeError: worker 1 stopped
                       ''')}
        for handle, (job, text) in enumerate(streams.items(), start=1):
            info = StreamInfo("train", f"/training/{job}/rank0.log", job, job=job)
            pipeline.open(StreamOpened(handle, info))
            pipeline.process(handle, LineFramer().feed(text.encode()))
            pipeline.finish(handle)

        assert "cuda_uncorrectable_ecc" == only(sink.detections, "cuda_uncorrectable_ecc").signature
        generic = only(sink.detections, "generic_traceback")
        assert ("job-b", None, Severity.ERROR) == (generic.job, generic.root_cause,
                                                   generic.severity)
