"""The generic layer's fourth shape: a diagnostic that reports a failed check.

nvidia-smi's pending remaps and retirements and its ERR! fields, npu-smi's health, ascend-dmi's
results, nccl-tests' ``#wrong`` column and out-of-bounds count, compute-sanitizer's error
summary, gpu-burn's FAULTY. The same tools' passing output stays quiet. (DCGM is read by its own
signatures.)
"""

from __future__ import annotations

import pytest
from support.generic import generic_scan, loud, only, text_of

from sigwatch.model import Severity

CHECK = "generic_failed_check"


def _check(text: str) -> tuple[Severity, dict[str, str], str]:
    d = only(generic_scan(text), CHECK)
    return d.severity, dict(d.captures), d.owner


class TestFailedChecks:
    def test_nvidia_smi_pending_row_remap_is_a_node_error(self) -> None:
        """``nvidia-smi -q``: a remap waits for a reset; the GPU's memory is failing."""
        severity, captures, owner = _check(text_of('''
                Remapped Rows
                    Correctable Error                 : 0
                    Uncorrectable Error               : 1
                    Pending                           : Yes
                    Remapping Failure Occurred        : No
            '''))

        assert (Severity.ERROR, "node") == (severity, owner)
        assert {"tool": "nvidia-smi", "check": "Pending: Yes"} == captures

    @pytest.mark.parametrize("line", [
        "        Remapping Failure Occurred        : Yes",
        "        Pending Page Blacklist            : Yes",
        "    Reset Required                        : Yes",
        "| N/A   ERR!  ERR!  ERR!    N/A /  N/A |   ERR!  /  81559MiB |   ERR!      Default |",
    ], ids=lambda v: v.strip()[:30])
    def test_other_nvidia_smi_failures(self, line: str) -> None:
        """A failed remap, a pending retirement, a reset required, a GPU the driver lost."""
        assert "nvidia-smi" == _check(line + "\n")[1]["tool"]

    def test_npu_smi_health_alarm_is_an_error_and_warning_a_warning(self) -> None:
        """npu-smi's Health column: Alarm and Critical are errors, Warning a warning."""
        alarm = _check("| 3     910B3               | Alarm         | 93.7        38      "
                       "          0    / 0             |\n")
        warn = _check("        Health Status                  : Warning\n")

        assert (Severity.ERROR, "health Alarm") == (alarm[0], alarm[1]["check"])
        assert Severity.WARNING == warn[0]

    def test_ascend_dmi_fail_names_the_item(self) -> None:
        """``ascend-dmi -dg``: the item line, then its result."""
        severity, captures, _owner = _check(text_of('''
            Hardware:
                driver:
                    HEALTH
                hbm:
                    FAIL
            '''))

        assert (Severity.ERROR, "hbm: FAIL") == (severity, captures["check"])

    def test_nccl_tests_wrong_results_are_read_from_the_table(self) -> None:
        """A non-zero ``#wrong`` in a row, read with the table's own header."""
        severity, captures, _owner = _check(text_of('''
            #                                                              out-of-place                       in-place
            #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
            #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
                       8             2     float     sum      -1    30.22    0.00    0.00      0    29.80    0.00    0.00      0
                 1048576        262144     float     sum      -1    98.11   10.69   18.70      0    97.42   10.76   18.83      3
            # Out of bounds values : 0 OK
            '''))

        assert (Severity.ERROR, "nccl-tests") == (severity, captures["tool"])
        assert "#wrong 3 at size 1048576" == captures["check"]

    @pytest.mark.parametrize(("line", "tool"), [
        ("# Out of bounds values : 12 FAILED", "nccl-tests"),
        (" Out of bounds values : 2 FAILED", "nccl-tests"),  # older nccl-tests: no "#"
        ("\tnvidia-smi: Expected GPU count: 1, found inside the VM: 0 : FAIL ", "checklist"),
        ("========= ERROR SUMMARY: 3 errors", "compute-sanitizer"),
        ("100.0%  proc'd: 1812 (40196 Gflop/s)   errors: 18  (FAULTY)   temps: 61 C", "gpu-burn"),
        ('    "result": "FAIL",', "diagnostic"),
        ("========= Invalid __global__ write of size 4 bytes", "compute-sanitizer"),
        ("| Result                        | Fail                                         |",
         "diagnostic"),
        ("|                               | Result: Fail                                 |",
         "diagnostic"),
    ], ids=lambda v: v[:30])
    def test_summary_lines_of_failed_runs(self, line: str, tool: str) -> None:
        """Counts above zero, FAULTY, a JSON result of FAIL."""
        assert tool == _check(line + "\n")[1]["tool"]


class TestPassingDiagnosticsAreQuiet:
    def test_passing_output_of_every_tool_is_quiet(self) -> None:
        """Pending No, Health OK, PASS/HEALTH, #wrong 0, 0 errors, OK."""
        found = generic_scan(text_of('''
                Remapped Rows
                    Pending                           : No
                    Remapping Failure Occurred        : No
                Reset Required                        : No
            | 0     910B3               | OK            | 93.7        38                0    / 0             |
                    Health Status                  : OK
            Hardware:
                device:
                    HEALTH
                network:
                    PASS
            #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
                       8             2     float     sum      -1    30.22    0.00    0.00      0    29.80    0.00    0.00      0
                    1024           256     float     sum      -1    31.02    0.03    0.06    N/A    30.11    0.03    0.06    N/A
            # Out of bounds values : 0 OK
            # Avg bus bandwidth    : 9.38
            ========= ERROR SUMMARY: 0 errors
            100.0%  proc'd: 1812 (40196 Gflop/s)   errors: 0   temps: 61 C
            {"result": "PASS", "status": "ok"}
            | Result                        | Pass                                         |
            | Software Library              | Result: Pass                                 |
             Out of bounds values : 0 OK
              lspci: Expected "3D controller: NVIDIA Corporation" count: 1, found inside the VM: 1 : PASS
            test_allreduce (tests.TestComm) ... FAIL
            '''))

        assert [] == loud(found)

    def test_a_fail_line_outside_a_diagnostic_item_is_not_a_check(self) -> None:
        """A bare FAIL needs the item line above it."""
        assert [] == [d for d in generic_scan("Summary:\n    FAIL\n") if d.signature == CHECK]


class TestHealthCheckers:
    """Health-check runners, device health reports and the node labels health checkers set."""

    @pytest.mark.parametrize(("line", "check"), [
        ("ERROR : Node Health Checks failed - viz3d-1 - AMS081063509028 - Check "
         "check_nvsmi_healthmon returned 127", "check_nvsmi_healthmon returned 127"),
        ("[node12] check gpu_count exited with code 1", "gpu_count returned 1"),
        ("ERROR:  nhc:  Health check failed:  check_hw_ib:  No IB port mlx5_0:1 is ACTIVE",
         None),
        ("2024-05-01 10:00:00 health checks have failed on gpu-node-3 (2 of 9)", None),
        ("[2024-05-01T10:00:00.123] error: health_check failed: rc:1 output:ERROR:  nhc:  "
         "Health check failed:  check_gpu_xid: GPU Xid 79", None),
    ], ids=lambda v: v[:40] if v else "-")
    def test_a_failed_health_check_is_a_node_error(self, line: str, check: str | None) -> None:
        """NHC and the wrappers around it: a check that failed, or returned non-zero."""
        severity, captures, owner = _check(line + "\n")

        assert (Severity.ERROR, "node", "health check") == (severity, owner, captures["tool"])
        if check is not None:
            assert check == captures["check"]

    def test_a_device_health_table_with_error_codes(self) -> None:
        """``asys health``: overall health Warning with one error code is a warning, read
        with the health the row above states."""
        severity, captures, owner = _check(text_of('''
            asys health -d=0
             +-------------------+------------------------------+
             | Device ID: 0      | Overall Health: Warning      |
             |                   | ErrorCode Num: 1             |
             +===================+==============================+
             | 0xa419321c        | lp pmbus error               |
             +-------------------+------------------------------+
            '''))

        assert (Severity.WARNING, "node") == (severity, owner)
        assert {"tool": "device health", "check": "1 error codes, health Warning"} == captures

    @pytest.mark.parametrize(("line", "severity"), [
        (" | Device ID: 3      | Overall Health: Critical     |", Severity.ERROR),
        ("    Health: Alarm", Severity.ERROR),
        ("  ErrorCode Num: 2", Severity.ERROR),
    ], ids=lambda v: str(v)[:30])
    def test_health_not_ok_or_error_codes_counted(self, line: str, severity: Severity) -> None:
        assert severity == _check(line + "\n")[0]

    @pytest.mark.parametrize("line", [
        "Labels:             autopilot.ibm.com/dcgm.level.3=ERR_2024-11-04_09.32.03UTC_"
        "page_retirement_row_remap.0",
        "                          autopilot.ibm.com/gpuhealth=EVICT",
        "node/gpu-7 labeled: example.com/gpu-diag=FAIL_pcie_bandwidth",
        '  "nvidia.com/gpu.health": "ok", "acme.io/nodecheck=UNHEALTHY"',
    ], ids=lambda v: v.strip()[:40])
    def test_a_health_label_that_says_err_fail_evict_or_unhealthy(self, line: str) -> None:
        """A health checker's verdict, as the node label it sets."""
        severity, captures, owner = _check(line + "\n")

        assert (Severity.ERROR, "node", "health label") == (severity, owner, captures["tool"])

    def test_passing_health_output_is_quiet(self) -> None:
        """Checks that returned 0, health OK, no error codes, labels that say PASS."""
        found = generic_scan(text_of('''
            Node Health Checks passed - viz3d-1 - Check check_nvsmi_healthmon returned 0
            [node12] check gpu_count exited with code 0
             | Device ID: 0      | Overall Health: OK           |
             |                   | ErrorCode Num: 0             |
            Labels:             autopilot.ibm.com/dcgm.level.3=PASS_2024-11-04_09.32.03UTC
                                      autopilot.ibm.com/gpuhealth=PASS
                                      autopilot.ibm.com/pcie-bw=ERROR_RATE_0
            errors: 0 health check failed count: 0
            '''))

        assert [] == loud(found)

    @pytest.mark.parametrize("line", [
        "health check failed for pod web-1, retrying in 5s",
        "export PYTHONWARNINGS=error_on_deprecated",
        "stderr_file=ERR_LOG.txt",
    ], ids=lambda v: v[:30])
    def test_near_misses_are_not_failed_checks(self, line: str) -> None:
        """A retry of a probe, and ERR/FAIL values of keys that are not about health."""
        assert [] == [d for d in generic_scan(line + "\n") if d.signature == CHECK]


class TestFabricAndCollectiveTestTools:
    """nccl-tests' (rccl-tests') own check of a call, and fi_info finding no provider."""

    @pytest.mark.parametrize(("text", "tool"), [
        ("e20a3f6a8c03: Test NCCL failure .../rccl-tests/build/src/hipify/common.cu.cpp:775 "
         "'unhandled cuda error (run with NCCL_DEBUG=INFO for details)'\n", "nccl-tests"),
        ("gpu-3: Test CUDA failure common.cu:891 'out of memory'\n", "nccl-tests"),
        ("$ fi_info -p cxi\nfi_getinfo: -61 (No data available)\n", "fi_info"),
    ], ids=["rccl-tests", "nccl-tests-cuda", "fi_info"])
    def test_a_tool_reporting_its_check_failed(self, text: str, tool: str) -> None:
        severity, captures, _owner = _check(text)

        assert (Severity.ERROR, tool) == (severity, captures["tool"])

    def test_an_inactive_nvlink_is_a_warning(self) -> None:
        """``nvidia-smi nvlink -s`` on an NVLink GPU: a link down is a degraded node."""
        severity, captures, _owner = _check(text_of('''
                GPU 3: Tesla V100-SXM2-32GB (UUID: GPU-1)
                         Link 0: 25.781 GB/s
                         Link 3: <inactive>
            '''))

        assert (Severity.WARNING, "NVLink 3 inactive") == (severity, captures["check"])

    @pytest.mark.parametrize("line", [
        "# Out of bounds values : 0 OK",
        "fi_getinfo returned 0 providers? check with fi_info -l",
        "provider: efa\n    fabric: efa\n    domain: rdmap0s6-rdm",
    ])
    def test_passing_output_is_quiet(self, line: str) -> None:
        assert [] == loud(generic_scan(line + "\n"))


class TestTheWordGate:
    """``match_check`` first asks for one of the words a failed check needs; the gate may only
    skip lines the patterns would not take (the per-chunk driver reads many lines with an error
    word and no check)."""

    @staticmethod
    def _corpus_lines() -> list[str]:
        import tomllib
        from pathlib import Path

        root = Path(__file__).resolve().parents[1] / "corpus"
        texts = [str(tomllib.loads(p.read_text(encoding="utf-8")).get("text", ""))
                 for p in sorted((root / "real").rglob("*.toml"))]
        texts += [p.read_text(encoding="utf-8", errors="replace")
                  for folder in ("goodlogs", "incidents")
                  for p in sorted((root / folder).rglob("*")) if p.is_file()]
        return [line for text in texts for line in text.splitlines()]

    def test_the_gate_skips_only_lines_no_check_takes(self) -> None:
        from sigwatch.detectors.generic.checks import match_check, read_check

        lines = self._corpus_lines()
        lines += ["  HEALTH_CHECK FAILED on gpu 3", "Overall Health: Abnormal",
                  "| 2  910B  | Health: Fault |", "node.health/nhc=EVICT_gpu", "Pending : Yes"]
        taken = 0
        for previous, line in zip(["", *lines], lines, strict=False):
            expected = read_check(line, previous)
            assert match_check(line, previous) == expected, line
            taken += expected is not None
        assert taken >= 15  # the corpus holds failed checks: the comparison is not vacuous
