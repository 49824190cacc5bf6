#!/usr/bin/env python3
"""Generate ``patterns/COVERAGE.md``: which upstream error names the library catches.

The ground truth of wording is the emitting projects' own enumerations, extracted by
``bench/extract_enums.py`` into ``patterns/_enums/<family>.json`` (names, values, message texts,
source URL and commit). For every name this renders a line in the format the name reaches logs
in (see ``FAMILIES``), runs it through the real engine, and records which signature caught it.
Names the library leaves out on purpose are listed with the reason. A name that is neither
caught nor excluded is a gap, and the test fails on it.

    .venv/bin/python bench/coverage.py            # check that COVERAGE.md is current
    .venv/bin/python bench/coverage.py --write    # regenerate it
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "daemon"))

from sigwatch.clock import FakeClock  # noqa: E402
from sigwatch.model import Severity, StreamInfo  # noqa: E402
from sigwatch.patterns.compiled import PatternSet  # noqa: E402
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns  # noqa: E402
from sigwatch.pipeline import Engine, Pipeline  # noqa: E402
from sigwatch.scanning import scan_bytes  # noqa: E402
from sigwatch.sinks.base import CollectingSink  # noqa: E402

__all__ = ["ENUMS", "FAMILIES", "OUTPUT", "Row", "evaluate", "main", "render"]

ENUMS = REPO / "patterns" / "_enums"
OUTPUT = REPO / "patterns" / "COVERAGE.md"

Entry = dict[str, str]


@dataclass(frozen=True)
class Family:
    """How one family's names reach a log, and what the library leaves out on purpose."""

    title: str
    formats: tuple[str, ...]  # how the rendered lines look (documentation)
    render: Callable[[Entry], list[str]]
    excluded: dict[str, str] = field(default_factory=dict)


def _short(message: str) -> str:
    """NCCL before 2.12 printed the bare message, without the '(run with ...)' hint."""
    return message.split(" (run with")[0].split(" - please")[0]


NOT_A_FAILURE = "a status result, not a failure (polling, or the operation is still running)"
ALREADY = "benign: the requested state already holds; frameworks ignore it"
SUCCESS = "success code"
EXIT = "printed while the runtime unloads at process exit; fallout, never a cause"


WARNING_CODE = "a warning code (first letter W): the operation went on"
NOT_PRINTED = "not printed by name in any format found in the project's sources"
_PRINTF = re.compile(r"%[-#0-9.]*(?:hh|h|ll|l|z)?([sdiuxXfeg%])")
_BRACES = re.compile(r"\{(\w*)\}")
_BRACE_VALUES = {"file": "/src/tensorrt_llm/cpp/tensorrt_llm/common/mpiUtils.cpp", "line": "330",
                 "mpi_error_code": "15", "func": "::cudaMalloc(ptr, n)",
                 "cudaGetErrorString": "an illegal memory access was encountered"}


def _fill(template: str) -> str:
    """A message template with printf (%s, %u) and format ({name}) fields filled."""
    text = re.sub(r"%s(\]? bytes)", r"4096\1", template)  # a size printed with %s
    text = _PRINTF.sub(lambda m: "%" if m[1] == "%" else ("x" if m[1] == "s" else "1"), text)
    return _BRACES.sub(lambda m: _BRACE_VALUES.get(m[1], "1"), text)


def _names(family: str, group: str) -> list[str]:
    """Names of one group of a family's table (for exclusions that cover a whole group)."""
    data = json.loads((ENUMS / f"{family}.json").read_text(encoding="utf-8"))
    return [e["name"] for e in data["entries"] if e.get("group") == group]


CANN_TIME = "2026-01-05-10:12:30.101.202"


def _cann(e: Entry) -> list[str]:
    code = e["name"]
    if code.endswith("9999"):  # internal errors have no template: a header and the raw message
        return [f"{code}: Inner Error!", f"{code}: Internal error!"]
    message = _fill(e["message"])
    return [f"{code}: {message}", f"[PID: 28731] {CANN_TIME} {e['value']}({code}): {message}"]


def _acl(e: Entry) -> list[str]:
    if e["value"] == "0":
        return []
    if e["name"] == "ACL_ERROR_RT_FEATURE_NOT_SUPPORT":
        return ["[WARN]synchronize,torch_npu/csrc/core/npu/NPUStream.cpp:413:Feature is not "
                "supported and the possible cause is that driver and firmware packages do not "
                "match."]
    call = "NPU function error: aclrtSynchronizeStream(stream), error code is " + e["value"]
    return [f"RuntimeError: synchronize:torch_npu/csrc/core/npu/NPUStream.cpp:413 {call}",
            f" {call} [ERROR] 2026-01-05-10:00:00 (PID:4123, Device:0, RankID:3) ERR00100 PTA "
            f"call acl api failed."]


def _cann_rt(e: Entry) -> list[str]:
    if e["name"] == "RT_ERROR_NONE":
        return []
    reason = e["message"]
    return [f"rtStreamSynchronize execute failed, reason=[{reason}]",
            f"EE9999[PID: 31022] {CANN_TIME} (EE9999):  rtStreamSynchronize execution failed, "
            f"reason={reason}[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:69]"]


def _hccl(e: Entry) -> list[str]:
    if e["value"] == "0":
        return []
    call = ("HCCL function error: HcclAllReduce(send, recv, count, type, op, comm, stream), "
            "error code is " + e["value"])
    return [f"RuntimeError: HcclAllreduce:torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:2810 "
            f"{call}",
            f" {call} [ERROR] 2026-01-05-10:00:00 (PID:4123, Device:0, RankID:3) ERR02200 DIST "
            f"call hccl api failed."]


def _dcgm(e: Entry) -> list[str]:
    if not e["message"] or e["name"] == "DCGM_FR_OK":
        return []
    message = _fill(e["message"])
    return [f"| Warning: GPU1             | {message[:45]:<45} |",
            f'                                "warning" : "{message}",']


def _ray(e: Entry) -> list[str]:
    if e.get("group") == "WorkerExitType":
        return ["WARNING worker.py:1839 -- A worker died or was killed while executing a task. "
                f"RayTask ID: 8ce7275b7a7953cc794f8c138a616d91cb907c1b01000000 Worker exit type: "
                f"{e['name']} Worker exit detail: Worker exits with an exit code 1."]
    if e["name"] == "RayTaskError":
        return ["ray.exceptions.RayTaskError(ZeroDivisionError): ray::train_step() "
                "(pid=31022, ip=10.0.0.12)"]
    message = e["message"].replace("{", "<").replace("}", ">")
    return [f"ray.exceptions.{e['name']}: {message}"]


def _trtllm(e: Entry) -> list[str]:
    message = _fill(e["message"])
    if e["name"] == "Failed: MPI error":
        message = "[TensorRT-LLM][ERROR] Assertion failed: " + message
    return [f"RuntimeError: {message} (/src/tensorrt_llm/cpp/tensorrt_llm/runtime/bufferManager.cpp:211)"]


FAMILIES: dict[str, Family] = {
    "cuda_runtime": Family(
        "CUDA runtime API (cudaError_t)",
        ("CuPy: `cupy_backends.cuda.api.runtime.CUDARuntimeError: <name>: ...`",),
        lambda e: [f"cupy_backends.cuda.api.runtime.CUDARuntimeError: {e['name']}: error"],
        {"cudaSuccess": SUCCESS, "cudaErrorNotReady": NOT_A_FAILURE,
         "cudaErrorPeerAccessAlreadyEnabled": ALREADY,
         "cudaErrorHostMemoryAlreadyRegistered": ALREADY, "cudaErrorCudartUnloading": EXIT}),
    "cuda_driver": Family(
        "CUDA driver API (CUresult)",
        ("XLA/TensorFlow: `failed call to cuInit: <NAME>: ...`",),
        lambda e: [f"failed call to cuInit: {e['name']}: error"],
        {"CUDA_SUCCESS": SUCCESS, "CUDA_ERROR_NOT_READY": NOT_A_FAILURE,
         "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED": ALREADY,
         "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED": ALREADY, "CUDA_ERROR_DEINITIALIZED": EXIT}),
    "nccl": Family(
        "NCCL (ncclResult_t)",
        ("PyTorch: `RuntimeError: NCCL error in: <file>:<line>, <ncclGetErrorString>, NCCL version "
         "<v>`, with the message of NCCL >= 2.12 and the shorter one of older versions",),
        lambda e: [f"RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/"
                   f"ProcessGroupNCCL.cpp:1275, {m}, NCCL version 2.18.1"
                   for m in dict.fromkeys([e.get("message", e["name"]),
                                           _short(e.get("message", e["name"]))])],
        {"ncclSuccess": SUCCESS,
         "ncclInProgress": "a non-blocking communicator is still initialising; not a failure"}),
    "hip": Family(
        "HIP runtime (hipError_t)",
        ("HIP samples' HIPCHECK: `error: '<name>'(<value>) at <file>:<line>`",),
        lambda e: [f"error: '{e['name']}'({e['value']}) at train.cpp:61"],
        {"hipSuccess": SUCCESS, "hipErrorNotReady": NOT_A_FAILURE,
         "hipErrorPeerAccessAlreadyEnabled": ALREADY,
         "hipErrorHostMemoryAlreadyRegistered": ALREADY, "hipErrorDeinitialized": EXIT}),
    "hsa": Family(
        "ROCm HSA runtime (hsa_status_t)",
        ("ROCclr queue callback: `Callback: Queue <q> aborting with error : <NAME>: <message> "
         "code: <value>`",),
        lambda e: [f":0:rocdevice.cpp            :2614: 5128393475 us: Callback: Queue "
                   f"0x7f2a10000000 aborting with error : {e['name']}: "
                   f"{e.get('message', '')} code: {e['value']}"],
        {"HSA_STATUS_SUCCESS": SUCCESS,
         "HSA_STATUS_INFO_BREAK": "informational: a traversal was stopped by its callback"}),
    "level_zero": Family(
        "oneAPI Level Zero (ze_result_t)",
        ("chipStar / SYCL backends: `... (<NAME> ) in <file>:<line>`",),
        lambda e: [f"CHIP error [TID 1] [1693481190.609691528] : hipErrorTbd ({e['name']} ) "
                   f"in /src/CHIPBackendLevel0.cc:1374:enqueueBarrierImpl"],
        {"ZE_RESULT_SUCCESS": SUCCESS, "ZE_RESULT_NOT_READY": NOT_A_FAILURE,
         "ZE_RESULT_QUERY_TRUE": "a query answer, not an error",
         "ZE_RESULT_QUERY_FALSE": "a query answer, not an error",
         "ZE_RESULT_WARNING_DROPPED_DATA": "a warning result; the call succeeded",
         "ZE_RESULT_WARNING_ACTION_REQUIRED": "a warning result; the call succeeded",
         "ZE_RESULT_EXP_RTAS_BUILD_RETRY": "ray-tracing build status, not used by training",
         "ZE_RESULT_EXP_RTAS_BUILD_DEFERRED": "ray-tracing build status, not used by training",
         "ZE_RESULT_EXT_RTAS_BUILD_RETRY": "ray-tracing build status, not used by training",
         "ZE_RESULT_EXT_RTAS_BUILD_DEFERRED": "ray-tracing build status, not used by training"}),
    "absl": Family(
        "Abseil status codes as XLA/JAX report them (absl::StatusCode)",
        ("JAX: `jaxlib.xla_extension.XlaRuntimeError: <CODE>: <message>`",),
        lambda e: [f"jaxlib.xla_extension.XlaRuntimeError: {e['name']}: operation failed"],
        {"OK": SUCCESS}),

    # --- families of issue 20 (their own sources; see patterns/_enums/<family>.json) ---------
    "cann": Family(
        "Huawei CANN error codes (error manager: EXXXXX)",
        ("older CANN: `<CODE>: <message>`",
         "current CANN: `[PID: n] <time> <errTitle>(<CODE>): <message>` (error_manager.cc)",
         "internal errors (X9999): `<CODE>: Inner Error!` (CANN 7/8) and `<CODE>: Internal error!`"),
        lambda e: _cann(e),
        {n: WARNING_CODE for n in ("W40010", "W40011", "W40012", "WE0001")}),
    "acl": Family(
        "Huawei CANN ACL / runtime return codes (aclError)",
        ("torch_npu: `NPU function error: <call>, error code is <value>` (NPUException.h), "
         "in the normal and the compact (TORCH_NPU_COMPACT_ERROR_OUTPUT) form",
         "ACL_ERROR_RT_FEATURE_NOT_SUPPORT: torch_npu's one-time `[WARN]...Feature is not "
         "supported...` line"),
        lambda e: _acl(e),
        {"ACL_ERROR_NONE": SUCCESS, "ACL_SUCCESS": SUCCESS, "ACL_RT_SUCCESS": SUCCESS,
         "ACL_ERROR_RT_FEATURE_NOT_SUPPORT": "torch_npu prints a one-time [WARN] (driver and "
                                             "firmware packages may not match) and goes on"}),
    "cann_rt": Family(
        "Huawei CANN runtime internal errors (rtError reasons)",
        ("older CANN plog/stderr: `<rtCall> execute failed, reason=[<reason>]`",
         "current CANN: `EE9999[PID: n] <time> (EE9999):  <rtCall> execution failed, "
         "reason=<reason>[FUNC:...]` (error_message_manage.cc)"),
        lambda e: _cann_rt(e),
        {"RT_ERROR_NONE": SUCCESS}),
    "hccl": Family(
        "Huawei HCCL return codes (HcclResult)",
        ("torch_npu: `HCCL function error: <call>, error code is <value>` (HCCLUtils.hpp), "
         "normal and compact form",),
        lambda e: _hccl(e),
        {"HCCL_SUCCESS": SUCCESS}),
    "dcgm": Family(
        "NVIDIA DCGM health and diagnostic errors (dcgmError_t)",
        ("dcgmi diag -v table: `| Warning: GPU<n> | <first 45 characters of the message> |`",
         "dcgmi diag -j: `\"warning\" : \"<message>\",`"),
        lambda e: _dcgm(e),
        {"DCGM_FR_OK": SUCCESS,
         **{n: "no message template (DCGM writes the text in place); the failed test still "
               "shows as a Fail row (dcgm_diag_failed)"
            for n in ("DCGM_FR_EUD_BINARY_PERMISSIONS", "DCGM_FR_EUD_NON_ROOT_USER",
                      "DCGM_FR_EUD_SPAWN_FAILURE", "DCGM_FR_EUD_TIMEOUT", "DCGM_FR_EUD_ZOMBIE",
                      "DCGM_FR_EUD_NON_ZERO_EXIT_CODE", "DCGM_FR_EUD_TEST_FAILED",
                      "DCGM_FR_PAUSE_RESUME_FAILED", "DCGM_FR_CUDA_FM_NOT_INITIALIZED",
                      "DCGM_FR_BINARY_PERMISSIONS", "DCGM_FR_RETEST_REQUESTED")},
         **{n: "a skip notice: the test did not run on this GPU or SKU; not a failed check"
            for n in ("DCGM_FR_TEST_DISABLED", "DCGM_FR_TEST_SKIPPED", "DCGM_FR_ECC_DISABLED",
                      "DCGM_FR_ECC_UNSUPPORTED", "DCGM_FR_L1TAG_UNSUPPORTED",
                      "DCGM_FR_CONCURRENT_GPUS", "DCGM_FR_GPU_OP_MODE")},
         "DCGM_FR_HAD_TO_RESTORE_STATE": "a note that DCGM restored the GPU state after the "
                                         "test; not a failed check"}),
    "nvml": Family(
        "NVML return codes as the NVIDIA k8s device plugin logs them (go-nvml)",
        ("k8s-device-plugin (klog): `Failed to initialize NVML: <NAME>.` and "
         "`nvml init failed: <NAME>` (internal/plugin/factory.go; go-nvml's default error "
         "string is the name)",),
        lambda e: [] if e["name"] == "SUCCESS" else [
            f"E0105 10:00:00.000000       1 factory.go:99] Failed to initialize NVML: "
            f"{e['name']}.",
            f"W0105 10:00:00.000000       1 factory.go:108] nvml init failed: {e['name']}"],
        {"SUCCESS": SUCCESS}),
    "libfabric": Family(
        "libfabric return codes (fi_errno)",
        ("aws-ofi-nccl through NCCL: `NCCL WARN NET/OFI <call> failed. RC: -<value>, ERROR: "
         "<fi_strerror>` and `... RC: -<value>. Error: <fi_strerror>`",),
        lambda e: [] if e["name"] == "FI_SUCCESS" else [
            f"ip-10-0-1-23:24811:24890 [3] nccl_net_ofi_ofiutils.cpp:233 NCCL WARN NET/OFI "
            f"Couldn't create fabric. RC: -{e['value']}, ERROR: {e['message']}",
            f"ip-10-0-1-23:24811:24890 [3] nccl_net_ofi_net.cpp:953 NCCL WARN NET/OFI Retrieving "
            f"option endpoint FI_OPT_INJECT_RMA_SIZE failed. RC: -{e['value']}. Error: "
            f"{e['message']}"],
        {"FI_SUCCESS": SUCCESS}),
    "efa": Family(
        "AWS EFA provider errors (efa_errno, efa_strerror)",
        ("aws-ofi-nccl: `NET/OFI Request <p> (<type>) completed with error: err: <n>, flags: "
         "<n>, prov_errno: <value>, strerror: <message>, len: <n>`",
         "libfabric log: `libfabric:<pid>:<time>::efa:eq:efa_base_ep_write_eq_error():<line>"
         "<warn> Writing error to EQ: err: <fi_strerror> (<n>) prov_errno: <message> (<value>)`"),
        lambda e: [] if e["name"] == "EFA_IO_COMP_STATUS_OK" else [
            f"ip-10-0-1-23:24811:24890 [3] platform-aws.cpp:1047 NCCL WARN NET/OFI Request "
            f"0x7f2a3c01b2e0 (send) completed with error: err: 5, flags: 0, prov_errno: "
            f"{e['value']}, strerror: {e['message']}, len: 0",
            f"libfabric:24811:1767607200::efa:eq:efa_base_ep_write_eq_error():835<warn> Writing "
            f"error to EQ: err: Input/output error (5) prov_errno: {e['message']} ({e['value']})"],
        {"EFA_IO_COMP_STATUS_OK": SUCCESS}),
    "synapse": Family(
        "Habana SynapseAI status codes (synStatus)",
        ("Gaudi PyTorch bridge: `synStatus <value> [<brief description>]. ` "
         "(habana_helpers/logging.cpp formatStatusMsg) inside HABANA_ASSERT and node-creation "
         "errors",),
        lambda e: [] if e["name"] == "synSuccess" else [
            f"RuntimeError: [Rank:0] Habana exception raised from launch at "
            f"hpu_habana_launch_op_pt_lowering.cpp:640: synStatus {e['value']} [{e['message']}]. ",
            f"RuntimeError: synNodeCreateWithId failed for node: batch_gemm with synStatus "
            f"{e['value']} [{e['message']}]. ."],
        {"synSuccess": SUCCESS}),
    "hcl": Family(
        "Habana HCL result codes (hcclResult_t, Gaudi)",
        ("not printed by name: the bridge raises `Collective call returned error` and HCL's "
         "message text comes from its library at run time",),
        lambda e: [],
        {n: NOT_PRINTED for n in (
            "hcclUninitialized", "hcclSuccess", "hcclNoDeviceFound", "hcclUnsupported",
            "hcclOutOfMemory", "hcclUnhandledSynapseError", "hcclSystemError",
            "hcclInternalError", "hcclInvalidArgument", "hcclInvalidUsage", "hcclSocketError",
            "hcclLibfabricError", "hcclTryAgainError", "hcclBusy", "hcclStreamError",
            "hcclSynapseTerminated", "hcclPortDown")}),
    "horovod": Family(
        "Horovod status types and exceptions",
        ("Python: `horovod.common.exceptions.<Name>: <message>`",),
        lambda e: [] if e["value"] == "Horovod status type (StatusType)" or e["message"] == \
            "Horovod status type (StatusType)" else [
            f"horovod.common.exceptions.{e['name']}: ncclAllReduce failed: unhandled system "
            f"error"],
        {"HostsUpdatedInterrupt": "elastic mode: the host set changed and Horovod resets; not "
                                  "a failure",
         **{n: "a C++ status type: Horovod prints the status message, not the type name "
               "(HorovodInternalError carries it to Python)"
            for n in ("OK", "UNKNOWN_ERROR", "PRECONDITION_ERROR", "ABORTED", "INVALID_ARGUMENT",
                      "IN_PROGRESS")}}),
    "ray": Family(
        "Ray exceptions and worker exit types",
        ("driver traceback: `ray.exceptions.<Name>: <message>` "
         "(RayTaskError as `RayTaskError(<cause>)`)",
         "worker exit types in the driver warning: `... Worker exit type: <NAME> Worker exit "
         "detail: ...` (ray-oom-prevention.rst)"),
        lambda e: _ray(e),
        {"TaskCancelledError": "a cancellation the program asked for (ray.cancel)",
         "GetTimeoutError": "the timeout the caller passed to ray.get; the program decides",
         "PlasmaObjectNotAvailable": "an internal signal: the object is not local yet",
         "AsyncioActorExit": "an actor leaving on purpose (exit_actor)",
         "PendingCallsLimitExceeded": "back-pressure to the caller (max_pending_calls)",
         "INTENDED_SYSTEM_EXIT": "an intended exit (idle worker reclaimed)",
         "INTENDED_USER_EXIT": "an intended exit (exit code 0, ray.kill, exit_actor)"}),
    "vllm": Family(
        "vLLM engine failures (exceptions and start-up refusals)",
        ("Python: `<exception class>: <message>` (EngineDeadError with its module path)",
         "engine core and executor logger lines: `(EngineCore_DP0 pid=n) ERROR <time> [<file>:<line>] <message>`"),
        lambda e: [("(EngineCore_DP0 pid=3120) ERROR 01-05 10:00:00 [core.py:708] "
                    if e["value"].startswith("logger.") else
                    f"vllm.v1.engine.exceptions.{e['name']}: " if e["name"].endswith("Error") else
                    f"{e['value']}: ") + _fill(e["message"])],
        {"EngineGenerateError": "one request failed in AsyncLLM.generate; the engine goes on "
                                "(its docstring: Recoverable)"}),
    "sglang": Family(
        "SGLang server failures (start-up and scheduler)",
        ("logger lines: `[<time> TP0] <message>`; exceptions: `RuntimeError: <message>`",),
        lambda e: [(f"{e['value']}: " if e["value"][0].isupper() else
                    "[2026-01-05 10:00:00 TP0] ") + _fill(e["message"])],
        {"Decode out of memory happened": "INFO: requests are retracted and retried; SGLang's "
                                          "tuning guide calls occasional ones okay"}),
    "trtllm": Family(
        "TensorRT-LLM error formats (TllmException, CUDA and MPI checks)",
        ("Python: `RuntimeError: <message> (<file>:<line>)`; MPI check failures inside "
         "`[TensorRT-LLM][ERROR] Assertion failed: ...`",),
        lambda e: _trtllm(e),
        {"kUNKNOWN_ERROR": NOT_PRINTED, "kNETWORK_ERROR": NOT_PRINTED}),
    "paddle": Family(
        "PaddlePaddle error types (common::ErrorCode)",
        ("Error Message Summary: `<Name>: <message> (at <file>:<line>)`",
         "Python exception (short form): `<PythonError>: (<Type>) <message> (at <file>:<line>)`"),
        lambda e: [f"{e['name']}: The input tensor is not initialized. "
                   f"(at /paddle/paddle/phi/core/dense_tensor.cc:154)",
                   f"RuntimeError: ({e['name'].removesuffix('Error')}) The input tensor is not "
                   f"initialized. (at /paddle/paddle/phi/core/dense_tensor.cc:154)"],
        {"Error": "the untyped legacy error: its summary line 'Error: <message>' carries no type "
                  "that tells it from any other program's error line"}),
    "torch_npu": Family(
        "torch_npu error codes (ERR<submodule><code>)",
        ("torch_npu: `[ERROR] <time> (PID:n, Device:d, RankID:r) ERR<module:2><code:3> <MODULE> "
         "<message>` (utils/_error_code.py, NPUException.cpp formatErrorCode)",),
        lambda e: [f"[ERROR] 2026-01-05-10:00:00 (PID:4123, Device:0, RankID:3) {e['name']} "
                   f"{e['message']}"],
        {n: "success: torch_npu never prints it as an error"
         for n in ("ERR00000", "ERR01000", "ERR02000", "ERR03000", "ERR04000", "ERR99000")}),
    "mindspore": Family(
        "MindSpore status codes (mindspore::StatusCode) and device memory failure",
        ("runtime log / exception: `Device(id:<n>) memory isn't enough and alloc failed, kernel "
         "name: <kernel>, alloc size: <n>B.`",
         "StatusCode names are not printed (Status::ToString gives 'Thread ID <id> <generic "
         "text>')"),
        lambda e: [] if e.get("group") == "StatusCode" else [
            f"RuntimeError: {_fill(e['message'])}"],
        {n: "a C++ API status: MindSpore prints its generic text ('Common error code.', "
            "'Unexpected error'), not the name; a failing MindSpore job shows its CANN code "
            "(table cann) or its memory wording"
         for n in _names("mindspore", "StatusCode")}),
}


@dataclass(frozen=True)
class Row:
    """One upstream name and what the library does with it."""

    name: str
    value: str
    message: str
    caught_by: tuple[str, ...]
    excluded: str

    @property
    def status(self) -> str:
        if self.excluded:
            return "left out"
        return "covered" if self.caught_by else "NOT COVERED"


def _detect(engine: Engine, line: str) -> set[str]:
    sink = CollectingSink()
    scan_bytes(Pipeline(engine, [sink], clock=FakeClock()), StreamInfo("coverage", "-", "-"),
               (line + "\n").encode("utf-8"))
    return {d.signature for d in sink.detections if d.severity >= Severity.WARNING}


def evaluate(patterns: PatternSet | None = None) -> dict[str, tuple[dict[str, object], list[Row]]]:
    """family -> (enum data, rows), every name run through the real engine."""
    if patterns is None:
        patterns, errors = load_patterns([builtin_pattern_dir()])
        if errors:
            raise SystemExit("\n".join(str(e) for e in errors))
    engine = Engine(patterns)
    out: dict[str, tuple[dict[str, object], list[Row]]] = {}
    for family, spec in FAMILIES.items():
        data = json.loads((ENUMS / f"{family}.json").read_text(encoding="utf-8"))
        rows = []
        for entry in data["entries"]:
            excluded = spec.excluded.get(entry["name"], "")
            caught: set[str] = set()
            if not excluded:
                hits = [_detect(engine, line) for line in spec.render(entry)]
                caught = set.intersection(*hits) if hits else set()
            rows.append(Row(entry["name"], entry["value"], entry.get("message", ""),
                            tuple(sorted(caught)), excluded))
        out[family] = (data, rows)
    return out


def render(results: dict[str, tuple[dict[str, object], list[Row]]]) -> str:
    """The Markdown table, one section per family."""
    lines = ["# Coverage of upstream error names", "",
             "Generated by `bench/coverage.py` from the enumerations in `patterns/_enums/` "
             "(extracted from the projects' own sources by `bench/extract_enums.py`). Each name "
             "is rendered in the format it reaches logs in and run through the real engine; "
             "'covered' lists the signatures that raised an alarm (warning or above). "
             "`tests/patterns/test_coverage.py` keeps this file current.", ""]
    lines += ["| family | names | covered | left out on purpose | not covered |",
              "|---|---:|---:|---:|---:|"]
    for family, (data, rows) in results.items():
        counts = {s: sum(r.status == s for r in rows) for s in ("covered", "left out",
                                                                  "NOT COVERED")}
        lines.append(f"| {FAMILIES[family].title} | {len(rows)} | {counts['covered']} | "
                     f"{counts['left out']} | {counts['NOT COVERED']} |")
    for family, (data, rows) in results.items():
        spec = FAMILIES[family]
        lines += ["", f"## {spec.title}", "",
                  f"Source: <{data['source']}>"
                  + (f" (messages from `{data['messages_path']}` at the same commit)"
                     if data.get("messages_path") else ""),
                  "", "Rendered as: " + "; ".join(spec.formats), "",
                  "| name | value | status | caught by / reason |", "|---|---|---|---|"]
        for r in rows:
            why = ", ".join(f"`{s}`" for s in r.caught_by) if r.caught_by else r.excluded
            lines.append(f"| `{r.name}` | {r.value} | {r.status} | {why} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="Regenerate patterns/COVERAGE.md.")
    args = parser.parse_args(argv)
    text = render(evaluate())
    if args.write:
        OUTPUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUTPUT.relative_to(REPO)}")
        return 0
    current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
    if current != text:
        print("patterns/COVERAGE.md is stale: run bench/coverage.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
