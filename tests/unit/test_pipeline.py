"""The pipeline's behaviour: steps, ranks, supersedes, root cause, context, timeouts, metrics."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from sigwatch.clock import FakeClock
from sigwatch.model import StreamInfo
from sigwatch.patterns.loader import load_patterns
from sigwatch.pipeline import Engine, Pipeline
from sigwatch.scanning import scan_bytes
from sigwatch.sinks.base import CollectingSink
from sigwatch.sinks.metrics import MetricsSink
from sigwatch.telemetry.metrics import SelfMetrics

FINE = """
id = "fine_x"
title = "Fine"
severity = "error"
[match]
regex = 'real error'
"""

PAGE_FAULT = """
id = "pf_x"
title = "Page Fault"
severity = "error"
[match]
regex = 'Unexpected page fault'
[context]
before = 4
"""

TWO_STEP = """
id = "segv_gethandle"
title = "Segfault In GetHandle"
severity = "error"
[match]
regex = 'SIGSEGV'
[[match.then]]
regex = 'GetHandle'
within_lines = 3
"""


def _run(root, text: str | bytes, *, registry=None, clock=None) -> list:
    patterns, errors = load_patterns([root])
    assert [] == errors
    sink = CollectingSink()
    metrics = SelfMetrics(registry, "test") if registry is not None else None
    sinks = [sink] + ([MetricsSink(metrics)] if metrics else [])
    engine = Engine(patterns, on_timeout=(
        (lambda sig: metrics.regex_timeouts.labels(sig).inc()) if metrics else None))
    pipeline = Pipeline(engine, sinks, clock=clock or FakeClock(), metrics=metrics)
    data = text if isinstance(text, bytes) else text.encode()
    scan_bytes(pipeline, StreamInfo("src", "f.log", "k"), data)
    return sink.detections


class TestSteps:
    def test_two_steps_within_the_window_detect_on_the_last(
            self, write_pattern: Callable) -> None:
        """A segfault then a GetHandle frame a few lines later is one detection."""
        root = write_pattern("segv_gethandle", TWO_STEP)

        found = _run(root, "*** SIGSEGV received\n  #1 foo\n  #2 PjRt::GetHandle()\n")

        assert [3] == [d.line for d in found]

    def test_second_step_outside_the_window_does_not_detect(
            self, write_pattern: Callable) -> None:
        """A GetHandle frame long after the segfault belongs to something else."""
        root = write_pattern("segv_gethandle", TWO_STEP)

        found = _run(root, "SIGSEGV\n" + "x\n" * 5 + "GetHandle\n")

        assert [] == found

    def test_bare_first_step_alone_does_not_detect(self, write_pattern: Callable) -> None:
        """A segfault without the frame is not this signature."""
        root = write_pattern("segv_gethandle", TWO_STEP)

        assert [] == _run(root, "*** SIGSEGV received\n  #1 foo\n")

    def test_ranks_interleaved_in_one_file_do_not_mix(self, write_pattern: Callable) -> None:
        """Rank 1's frame does not complete rank 0's segfault."""
        root = write_pattern("segv_gethandle", TWO_STEP)

        found = _run(root, "[rank0]: SIGSEGV\n[rank1]: GetHandle\n[rank1]: ok\n")

        assert [] == found


class TestCorrelation:
    def test_specific_signature_supersedes_generic_on_the_same_line(
            self, write_pattern: Callable) -> None:
        """One line, one detection: the specific one wins."""
        write_pattern("generic_cuda", """
            id = "generic_cuda"
            title = "Generic"
            severity = "error"
            [match]
            regex = 'CUDA error: '
        """)
        root = write_pattern("cuda_oom_x", """
            id = "cuda_oom_x"
            title = "OOM"
            severity = "error"
            supersedes = ["generic_cuda"]
            [match]
            regex = 'CUDA error: out of memory'
        """)

        found = _run(root, "RuntimeError: CUDA error: out of memory\nCUDA error: other\n")

        assert [("cuda_oom_x", 1), ("generic_cuda", 2)] == [(d.signature, d.line) for d in found]

    def test_fallout_names_its_root_cause(self, write_pattern: Callable) -> None:
        """SIGTERM fan-out after an ECC error points at the ECC error."""
        write_pattern("ecc_x", """
            id = "ecc_x"
            title = "ECC"
            severity = "critical"
            [match]
            regex = 'uncorrectable ECC error'
        """)
        root = write_pattern("sigterm_x", """
            id = "sigterm_x"
            title = "SIGTERM"
            severity = "info"
            [collateral]
            caused_by = ["ecc_x"]
            [match]
            regex = 'closing signal SIGTERM'
        """)

        found = _run(root, "CUDA error: uncorrectable ECC error encountered\n"
                           "Sending process 12 closing signal SIGTERM\n")

        assert "ecc_x" == found[1].root_cause.signature
        assert found[0].root_cause is None

    def test_context_quotes_only_included_lines_before(self, write_pattern: Callable) -> None:
        """Context lines are the ones the signature asks for, in order."""
        root = write_pattern("pf_x", PAGE_FAULT + "include = ['onednn_verbose']\n")

        found = _run(root, "onednn_verbose,exec,matmul\nnoise\nonednn_verbose,exec,conv\n"
                           "Unexpected page fault from GPU at 0x1\n")

        assert ("onednn_verbose,exec,matmul", "onednn_verbose,exec,conv") == found[0].context


class TestHostileInput:
    def test_catastrophic_regex_is_stopped_and_counted(self, write_pattern: Callable) -> None:
        """A backtracking bomb costs one timeout per line, is counted, and matching goes on."""
        write_pattern("bomb_x", """
            id = "bomb_x"
            title = "Bomb"
            severity = "warning"
            [match]
            regex = '^(a|aa)+$'
            keywords = ["aaaa"]
        """)
        root = write_pattern("fine_x", FINE)
        registry = CollectorRegistry()

        found = _run(root, "a" * 5000 + "b\nreal error\n", registry=registry)

        assert ["fine_x"] == [d.signature for d in found]
        assert 1.0 == registry.get_sample_value(
            "sigwatch_regex_timeouts_total", {"signature": "bomb_x"})

    def test_binary_garbage_neither_crashes_nor_detects(self, write_pattern: Callable) -> None:
        """Random bytes, NULs and invalid UTF-8 are read, counted and ignored."""
        root = write_pattern("fine_x", FINE)
        garbage = bytes((i * 7919 + 13) % 256 for i in range(200_000))
        registry = CollectorRegistry()

        found = _run(root, garbage + b"\nreal error\n", registry=registry)

        assert ["fine_x"] == [d.signature for d in found]
        assert 0 < registry.get_sample_value("sigwatch_invalid_utf8_lines_total",
                                             {"source": "src"})


class TestMetrics:
    def test_every_signature_series_exists_at_zero(self, library) -> None:
        """increase() sees the first detection because the series exists from start-up."""
        registry = CollectorRegistry()
        metrics = SelfMetrics(registry, "test")

        metrics.declare_signatures(((s.id, s.severity.label) for s in library.signatures),
                                   ["training"])

        sig = library.signatures[0]
        assert 0.0 == registry.get_sample_value(
            "sigwatch_detections_total",
            {"signature": sig.id, "severity": sig.severity.label, "source": "training"})

    def test_detections_are_counted_by_signature_severity_and_source(
            self, write_pattern: Callable) -> None:
        """The stable metric counts each detection once."""
        root = write_pattern("fine_x", FINE)
        registry = CollectorRegistry()

        _run(root, "real error\nok\nreal error\n", registry=registry)

        assert 2.0 == registry.get_sample_value(
            "sigwatch_detections_total",
            {"signature": "fine_x", "severity": "error", "source": "src"})
        assert 3.0 == registry.get_sample_value("sigwatch_lines_total", {"source": "src"})


GENERIC_SEGV = """
id = "generic_segv"
title = "Generic Segfault"
severity = "error"
[match]
regex = 'SIGSEGV'
"""

SPECIFIC_SEGV = TWO_STEP.replace('severity = "error"',
                                 'severity = "error"\nsupersedes = ["generic_segv"]')


class TestSupersedeAcrossSteps:
    def test_generic_on_the_first_step_is_dropped_when_the_sequence_completes(
            self, write_pattern: Callable) -> None:
        """One incident, one detection: the specific two-step signature replaces the generic."""
        write_pattern("generic_segv", GENERIC_SEGV)
        root = write_pattern("segv_gethandle", SPECIFIC_SEGV)

        found = _run(root, "*** SIGSEGV received\n  #1 foo\n  #2 PjRt::GetHandle()\n")

        assert ["segv_gethandle"] == [d.signature for d in found]

    def test_generic_is_released_when_the_sequence_cannot_complete(
            self, write_pattern: Callable) -> None:
        """Without the frame, the generic detection is delivered, with its own line."""
        write_pattern("generic_segv", GENERIC_SEGV)
        root = write_pattern("segv_gethandle", SPECIFIC_SEGV)

        found = _run(root, "*** SIGSEGV received\n" + "  #n frame\n" * 5)

        assert [("generic_segv", 1)] == [(d.signature, d.line) for d in found]

    def test_generic_is_released_at_the_end_of_input(self, write_pattern: Callable) -> None:
        """A log that stops right after the segfault still reports it."""
        write_pattern("generic_segv", GENERIC_SEGV)
        root = write_pattern("segv_gethandle", SPECIFIC_SEGV)

        assert ["generic_segv"] == [d.signature for d in _run(root, "SIGSEGV\n")]


class TestCollateralSeverity:
    def test_fallout_takes_its_lower_severity_only_when_the_root_cause_is_seen(
            self, write_pattern: Callable) -> None:
        """The shell's segfault report is info after the crash was reported, error alone."""
        write_pattern("generic_segv", GENERIC_SEGV)
        root = write_pattern("shell_segv", """
            id = "shell_segv"
            title = "Shell Segfault"
            severity = "error"
            [collateral]
            caused_by = ["generic_segv"]
            severity = "info"
            [match]
            regex = 'Segmentation fault \\(core dumped\\)'
        """)

        after_root = _run(root, "SIGSEGV\nSegmentation fault (core dumped)\n")
        alone = _run(root, "Segmentation fault (core dumped)\n")

        assert ["error", "info"] == [d.severity.label for d in after_root]
        assert ["error"] == [d.severity.label for d in alone]


def test_context_of_an_interleaved_log_quotes_the_detection_rank_only(
        write_pattern: Callable) -> None:
    """Rank 0's page fault is quoted with rank 0's primitives, not rank 1's."""
    root = write_pattern("pf_x", PAGE_FAULT)

    found = _run(root, "[rank0]: conv fwd\n[rank1]: matmul f16\n[rank0]: conv bwd\n"
                       "host line without rank\n[rank0]: Unexpected page fault from GPU\n")

    assert ("conv fwd", "conv bwd", "host line without rank") == found[0].context
