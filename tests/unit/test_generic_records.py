"""The generic layer's third shape: error- and fatal-level records, by component.

A record in a format training stacks write is classified by component from its vocabulary, its
message masked into a template, a documented vendor code named with its meaning. Severity:
a fatal record is an error; an error record is a warning when its component is known, it
carries a documented code, it reports a process exit or a resource exhausted; otherwise it is
information only. Retries, counters at zero, deprecations and known start-up noise make nothing.
"""

from __future__ import annotations

import re

import pytest
from support.generic import corpus_lines, generic_scan, loud, only, text_of

from sigwatch.detectors.generic import detector, records, tracebacks
from sigwatch.detectors.generic._text import literal_first
from sigwatch.detectors.generic.codes import CodeTable
from sigwatch.detectors.generic.records import classify, parse_any, parse_record
from sigwatch.model import Severity
from sigwatch.patterns.loader import builtin_pattern_dir

RECORD = "generic_error_record"


def _record(line: str) -> tuple[Severity, dict[str, str]]:
    d = only(generic_scan(line + "\n"), RECORD)
    return d.severity, dict(d.captures)


class TestFormats:
    @pytest.mark.parametrize(("line", "form", "level"), [
        ("ERROR:trainer:checkpoint upload to s3 failed", "python", "error"),
        ("2024-05-01 10:00:00,123 - dataloader - ERROR - worker 3 died", "python", "error"),
        ("[2024-05-01 10:00:00,123] [ERROR] [engine.py:1120:step] gradient overflow", "bracket",
         "error"),
        ("ERROR 05-01 10:00:00 [engine.py:88] Engine core failed", "python", "error"),
        ("2024-05-01 10:00:00,123\tERROR worker.py:2012 -- Task failed", "python", "error"),
        ("2024-05-01 10:00:00.123 | ERROR    | train:step:42 - NaN in batch", "python", "error"),
        ("E1120 12:00:00.123456  1234 ProcessGroupNCCL.cpp:616] NCCL watchdog caught error",
         "glog", "error"),
        ("F1120 12:00:00.123456  1234 file.cc:12] Check failed: x", "glog", "fatal"),
        ("2018-05-28 23:08:09.915921: E tensorflow/stream_executor/cuda/cuda_dnn.cc:385] could "
         "not create cudnn handle", "glog", "error"),
        ("[E socket.cpp:610] [c10d] The server socket has failed to listen", "glog", "error"),
        ("[rank0]:[E321 02:07:08.465150152 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception "
         "detected by watchdog", "glog", "error"),
        ("[2024-05-01 10:00:00,123 E 9387 9387] (raylet) node_manager.cc:2868: worker died",
         "ray", "error"),
        ("[ERROR] RUNTIME(1234,python):2024-01-01-12:00:00.123.456 [stream.cc:1066] "
         "SyncStream failed", "cann", "error"),
        ("[ERROR] ME(12345:140000,MainProcess):2024-01-01-12:00:00.123.456 [kernel.cc:12] "
         "Launch] kernel launch failed", "cann", "error"),
        ("[TRT] [E] 1: [defaultAllocator.cpp::deallocate::35] Error Code 1: Cuda Runtime",
         "bracket", "error"),
        ("2024-11-25 09:13:08 [11,526ms] [Error] [omni.physx.plugin] PhysX error: Fetching GPU "
         "Narrowphase failed! 700", "bracket", "error"),
        ("[TensorRT-LLM][ERROR] Assertion failed: mpiSize == tp * pp", "bracket", "error"),
        ("[19:08:34.164986][PASS_MANAGER          ][error][tid:44F8A] Graph optimization failed",
         "bracket", "error"),
        ('time="2024-05-01T10:00:00Z" level=error msg="failed to get device handle" '
         "component=device-plugin", "logfmt", "error"),
        ('{"level":"fatal","ts":1714557600.1,"msg":"cannot open /dev/nvidiactl"}', "json",
         "fatal"),
        ("ERRO[0000] Failed to start plugin: nvml: Driver Not Loaded                "
         'component=plugin', "logrus", "error"),
        ("FATA[2024-05-01T10:00:00Z] error creating NVIDIA container runtime", "logrus",
         "fatal"),
        ("[1] 2019-06-13 01:17:08.886805: E external/org_tensorflow/tensorflow/compiler/xla/"
         "python/local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out",
         "glog", "error"),
        ("srun: error: node17: task 3: Exited with exit code 1", "program", "error"),
        ("[2019-09-24T10:10:06.901] [321.0] error: spank: required plugin spank_pyxis.so: "
         "init_post_opt() failed with rc=-1", "slurm", "error"),
        ('docker: Error response from daemon: could not select device driver "" with '
         "capabilities: [[gpu]].", "program", "error"),
        ("MIOpen(HIP): Error [BuildOcl] comgr status = INVALID_ARGUMENT (2)", "component",
         "error"),
        ("Error: an illegal memory access was encountered at device_memory.cu:121", "component",
         "error"),
    ], ids=lambda v: v[:36])
    def test_each_format_is_read_with_its_level(self, line: str, form: str,
                                                level: str) -> None:
        """The format's own level, not a word in the message."""
        record = parse_record(line)

        assert record is not None
        assert (form, level) == (record.form, record.level)

    @pytest.mark.parametrize("line", [
        "INFO:trainer:saved checkpoint, 0 errors",
        "W0302 19:39:39.186000 22436 redirects.py:27] NOTE: Redirects are not supported",
        "2024-05-01 10:00:00,123 - trainer - WARNING - error rate above 1%",
        "[2024-05-01 10:00:00,123] [INFO] [engine.py:12:step] error_bound=0.1",
        "Training failed with ERROR code 3 according to the user",
        "validation_error: 0.0123",
        "WARN[0012] error reading config, using defaults",
        "INFO[0000] Starting FS watcher; error handling enabled",
        "ERRO[x] not logrus's seconds or stamp",
    ], ids=lambda v: v[:36])
    def test_lower_levels_and_prose_are_not_error_records(self, line: str) -> None:
        """A level below error, or an error word that is not in the level's place."""
        assert parse_record(line) is None


class TestComponents:
    @pytest.mark.parametrize(("line", "component"), [
        ("ERROR:x:NCCL WARN NET/IB : Got completion from peer with error 12", "interconnect"),
        ("ERROR:x:failed to write checkpoint: No space left on device", "storage"),
        ("ERROR:x:docker: failed to start container", "container_runtime"),
        ("ERROR:x:slurmstepd: job step 12.0 aborted", "scheduler"),
        ("ERROR:x:all_reduce timed out in ProcessGroupNCCL", "collective"),
        ("ERROR:x:CUDA driver returned an error initialising the device", "accelerator_runtime"),
        ("[ERROR] HCCL(1234,python):2024-01-01-12:00:00.123.456 [op.cc:1] notify wait failed",
         "collective"),
        ("2021-Nov-01 06:02:18.0992 13660:14125 ERROR  NMGR:dlr_infer  Inference completed "
         "with err: 1004", "accelerator_runtime"),
        ("[ERR][BKCL][init.cpp:1485] BKCL dont support send to one peer multi times in one group",
         "collective"),
        # AMD's BLAS, cuRAND and DCGM's host engine are the accelerator's
        ("hipBLASLt error: Heuristic Fetch Failed!", "accelerator_runtime"),
        ("Error: Curand error 203 - rand.cpp:74: curandCreateGenerator failed",
         "accelerator_runtime"),
        ('level=error msg="Error getting the latest value: Host engine connection lost"',
         "accelerator_runtime"),
        # the KV-cache transfer engines of disaggregated serving move data over RDMA
        ("E0523 06:50:40.074718   223 client.cpp:444] Transfer failed for task0", "interconnect"),
        ("E0523 06:50:40.085733   223 store_py.cpp:367] Put operation failed with error: "
         "TRANSFER_FAIL", "interconnect"),
        ("E0708 09:26:26.525108   368 tcp_transport.cpp:136] Mooncake session::writeBody "
         "failed. Error: Bad address", "interconnect"),
        ("ERROR 08-07 04:48:56 [nixl_connector.py:816] NIXL register_memory failed",
         "interconnect"),
        ("ERROR:x:the config file is malformed", "other"),
    ], ids=lambda v: v[:30])
    def test_the_component_comes_from_the_vocabulary(self, line: str, component: str) -> None:
        """The most specific subject wins (an NCCL line about IB is the interconnect)."""
        record = parse_record(line)

        assert record is not None
        assert component == classify(record)


class TestSeverityRules:
    def test_a_classified_error_record_is_a_warning_with_a_masked_template(self) -> None:
        """Numbers, hex, paths and ids are masked in the template."""
        severity, captures = _record(
            "E1120 12:00:00.123456  1234 ProcessGroupNCCL.cpp:616] [Rank 3] NCCL communicator "
            "0x7f3a2c00 aborted after 600123 ms, state dumped to /tmp/nccl/dump-3.bin")

        assert Severity.WARNING == severity
        assert "collective" == captures["component"]
        assert "[Rank <*>] NCCL communicator <*> aborted after <*> ms, state dumped to <*>" == (
            captures["template"])

    def test_a_bare_error_in_an_unknown_component_is_information_only(self) -> None:
        """Nothing says what failed or that it matters."""
        severity, captures = _record("ERROR:app:could not parse optional field 'notes'")

        assert Severity.INFO == severity
        assert "other" == captures["component"]

    @pytest.mark.parametrize("line", [
        "2024-07-01 07:28:04.488 1 kserve ERROR [__main__.py:<module>():254] Failed to start "
        "model server: integer division or modulo by zero",
        "ERROR dynamo_runtime::worker: Application shutdown with error: Failed to connect to "
        "etcd server",
        "Error: Could not create backend",
    ], ids=lambda v: v[:40])
    def test_a_program_that_could_not_start_or_stopped_on_an_error_is_a_warning(
            self, line: str) -> None:
        """A server, backend or worker that could not start, or shut down with an error, in
        its own words: the end of a process, whatever the component."""
        severity, captures = _record(line)

        assert (Severity.WARNING, "other") == (severity, captures["component"])

    def test_a_go_error_that_is_nil_is_no_failure(self) -> None:
        """klog's E-record of a server that stopped with a nil error (a kubelet restart)."""
        found = generic_scan("E0829 21:34:53.142767 1043311 manager.go:455] device-plugin server "
                             "stopped serving: <nil>\n")

        assert [] == [d for d in found if d.signature == RECORD]

    def test_xla_slow_operation_alarms_are_notices(self) -> None:
        """XLA logs slow constant folding at E and says it is not necessarily a bug."""
        found = generic_scan(text_of('''
            2022-10-13 11:07:46.573300: E external/org_tensorflow/tensorflow/compiler/xla/service/slow_operation_alarm.cc:65] Constant folding an instruction is taking > 1s
            2022-10-13 11:07:47.789842: E external/org_tensorflow/tensorflow/compiler/xla/service/slow_operation_alarm.cc:133] The operation took 2.216622055s
            '''))

        assert [] == [d for d in found if d.signature == RECORD]

    def test_an_optional_part_that_could_not_load_is_still_information(self) -> None:
        severity, _captures = _record("2024-07-01 07:28:04.488 ERROR Failed to load optional "
                                      "plugin foo: not found")

        assert Severity.INFO == severity

    def test_a_bare_error_followed_by_the_process_ending_is_a_warning(self) -> None:
        """The record is information only unless the process ends within the next lines:
        then it is a warning naming the line that says so."""
        for ending in ("srun: error: node7: task 0: Exited with exit code 1",
                       "Segmentation fault (core dumped)"):
            found = generic_scan(text_of(f'''
                ERROR:app:could not parse optional field 'notes'
                saving partial results
                {ending}
                '''))

            [record] = [d for d in found if d.text is not None and "notes" in d.text]
            assert Severity.WARNING == record.severity, ending
            assert ("ended", ending) in record.facts

    def test_a_bare_error_the_process_survives_stays_information(self) -> None:
        """Fifty lines later the process is still there: information only."""
        found = generic_scan("ERROR:app:could not parse optional field 'notes'\n"
                             + "".join(f"step {i} loss 2.0\n" for i in range(60))
                             + "Killed\n")

        assert Severity.INFO == only(found, RECORD).severity

    def test_a_fatal_record_is_an_error(self) -> None:
        """The writer says the process cannot go on."""
        severity, _captures = _record("CRITICAL:trainer:model state is corrupt, stopping")

        assert Severity.ERROR == severity

    @pytest.mark.parametrize("line", [
        "[cosmos] 2026-05-14 05:28:06,261 - cosmos - ERROR - Process 1 failed with return "
        "code 1",
        "ERROR:app:worker ran out of memory while decoding",
        "2024-05-01 10:00:00 - w - ERROR - Error running aggregate: [Errno 24] Too many open "
        "files",
        "ERROR:runner:Execution of replica 0 failed: Resource exhausted: Out",
        "2024-05-01 10:00:00,123 - io - ERROR - read timed out, retrying (attempt 5/5)",
        "2025-11-08 10:07:09 ERROR router: request failed, retrying... (attempt 60 of 60)",
    ], ids=lambda v: v[:30])
    def test_an_exit_or_exhausted_resource_makes_an_unknown_component_a_warning(
            self, line: str) -> None:
        """The process ended, or ran out of memory, files, disk or its retries (the last
        attempt failed)."""
        severity, _captures = _record(line)

        assert Severity.WARNING == severity

    @pytest.mark.parametrize("line", [
        "ERROR:hub:download failed, will retry in 10 s",
        "2024-05-01 10:00:00,123 - io - ERROR - read timed out (attempt 2/5)",
        "ERROR:metrics:errors: 0, failures: 0",
        "ERROR:compat:torch.cuda.amp.GradScaler is deprecated",
        "2025-11-30 03:28:12.788229: E external/local_xla/xla/stream_executor/cuda/"
        "cuda_dnn.cc:8454] Unable to register cuDNN factory: Attempting to register factory "
        "for plugin cuDNN when one has already been registered",
        "ERROR: 2 GPU[0]: ras: RSMI_STATUS_NOT_SUPPORTED: This function is not supported in the "
        "current environment.",
        "NVML Error: NVML Shared Library Not Found - GPU usage metrics may not be reported.",
        "PMIX ERROR: PMIX_ERR_NOT_FOUND in file dstore_base.c at line 1567",
        "slurmstepd: error: *** JOB 31182239 ON sh-06-34 CANCELLED AT 2018-11-05T10:35:06 DUE "
        "TO JOB REQUEUE ***",
        "[qbd488:616077] PMIX ERROR: ERROR in file ../../src/mca/gds/ds12/gds_ds12_lock_pthread.c "
        "at line 169",
        "slurmstepd: error: couldn't chdir to `/root/bb': No such file or directory: going to "
        "/tmp instead",
        "slurmstepd: error: Exceeded step memory limit at some point. Step may have been "
        "partially swapped out to disk.",
        "...    x_gpu_0 * 2  # ERROR: trying to use x_gpu_0 on GPU 1",
        ">>> raise RuntimeError('CUDA error: demo')  # ERROR on purpose",
        "slurmstepd: error: _is_a_lwp: open() /proc/27133/status failed: No such file or "
        "directory",
    ], ids=lambda v: v[:30])
    def test_retries_counters_deprecations_and_known_noise_are_quiet(self, line: str) -> None:
        """Records that report no failure make no detection at all."""
        assert [] == generic_scan(line + "\n")

    def test_the_same_template_is_reported_once(self) -> None:
        """A record repeated with other numbers is one finding."""
        text = "".join(f"E1120 12:00:0{i}.000000  1 nccl.cc:1] NCCL timeout on rank {i}\n"
                       for i in range(5))

        assert 1 == len(generic_scan(text))


@pytest.fixture(name="codes", scope="module")
def _codes() -> CodeTable:
    return CodeTable.load(builtin_pattern_dir() / "_enums")


class TestVendorCodes:
    @pytest.mark.parametrize(("line", "code", "meaning"), [
        ("[ERROR] RUNTIME(1234,python):2024-01-01-12:00:00.123.456 [stream.cc:1066] Stream "
         "synchronize failed, error code=507014", "507014", "aicore execution times out"),
        ("ERROR 03-25 06:14:02 [multiproc_executor.py:880]        synchronize stream with "
         "timeout failed, runtime result = 507011[FUNC:ReportCallError][FILE:log_inner.cpp]",
         "507011", "model execution failed"),
        ("ERROR:npu:EZ9999: Inner Error!", "EZ9999", "inner error"),
        ("ERROR:acl:launch failed: ACL_ERROR_RT_AICORE_TIMEOUT", "ACL_ERROR_RT_AICORE_TIMEOUT",
         "aicore execution times out"),
        ("E0101 00:00:00.000000 1 k.cc:1] kernel launch: cudaErrorLaunchFailure",
         "cudaErrorLaunchFailure", "launch failure"),
        ("ERROR:dist:NCCL call returned ncclSystemError", "ncclSystemError",
         "unhandled system error"),
        ("ERROR:ofi:fi_sendmsg returned FI_EAGAIN", "FI_EAGAIN", "resource temporarily"),
    ], ids=lambda v: v[:30])
    def test_a_documented_code_is_named_with_its_meaning(self, codes: CodeTable, line: str,
                                                         code: str, meaning: str) -> None:
        """The meaning comes from the vendor's own table (patterns/_enums)."""
        severity, captures = _record(line)

        assert Severity.WARNING <= severity
        assert code == captures["code"]
        assert meaning in captures["meaning"].lower()
        assert code in {c.name for c in codes.find(line)}

    def test_a_line_led_by_a_documented_error_code_is_a_record(self) -> None:
        """``hipErrorNoBinaryForGpu: ...`` has no level, but the code says it."""
        severity, captures = _record(
            "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!")

        assert Severity.WARNING == severity
        assert "accelerator_runtime" == captures["component"]

    @pytest.mark.parametrize("line", [
        "E20001 fusion passes: 0 failed, 37 applied",
        "I0105 18:00:00.000412       1 health.go:60] Error shutting down NVML: "
        "ERROR_UNINITIALIZED",
        "NCCL INFO NET/OFI Using provider efa; retrying later on FI_EAGAIN",
        "ncclSuccess",
        "cudaErrorNotReady returned by cudaEventQuery while polling",
    ], ids=lambda v: v[:30])
    def test_code_look_alikes_and_low_levels_are_quiet(self, line: str) -> None:
        """A code without the error manager's colon, an info record, a status word, success,
        a 'not ready' answer to a poll."""
        assert [] == loud(generic_scan(line + "\n"))

    def test_the_tables_load_every_usable_family(self, codes: CodeTable) -> None:
        """Thousands of documented codes, success and warning codes left out."""
        assert len(codes) > 1500
        assert [] == codes.find("cudaSuccess HCCL_SUCCESS W40010: x ERR00000")


class TestMessageText:
    def test_the_detection_says_what_and_where(self) -> None:
        """Title by component, the summary names level, component, code and message."""
        d = only(generic_scan(
            "ERROR:dist:NCCL call returned ncclSystemError on rank 3\n"), RECORD)

        assert "Error Log Record (Collective Library)" == d.title
        assert "ERROR from collective: ncclSystemError (unhandled system error" in (
            d.remediation.summary)
        assert d.remediation.summary.endswith("NCCL call returned ncclSystemError on rank 3")
        assert ("component", "collective") in d.labels


def test_a_record_inside_a_traceback_report_is_still_read() -> None:
    """The launcher's error record after a traceback is both end evidence and a record."""
    found = generic_scan(text_of('''
        Traceback (most recent call last):
          File "train.py", line 9, in <module>
            main()
        ValueError: boom
        ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0
        '''))

    assert {"generic_traceback", RECORD} == {d.signature for d in loud(found)}


def test_records_go_to_the_non_paging_route_and_crashes_page() -> None:
    """Error records are ``test`` (Alertmanager's non-paging route); a crash is ``stable``."""
    found = generic_scan("ERROR:dist:NCCL call returned ncclSystemError on rank 3\n"
                         "Segmentation fault (core dumped)\n")

    assert {"generic_error_record": "test", "generic_native_crash": "stable"} == {
        d.signature: d.status for d in found}


# -- the patterns, rewritten for speed, match as written -------------------------------------------

REWRITTEN = [
    *((f"vocabulary {name}", words) for name, words in records.VOCABULARY_WORDS),
    ("ended", tracebacks.ENDED_WORDS),
    ("continued", tracebacks.CONTINUED_WORDS),
    ("exit", detector.EXIT_WORDS),
    ("strong", detector.STRONG_WORDS),
    ("benign", detector.BENIGN_WORDS),
]


class TestLiteralFirst:
    @pytest.mark.parametrize(("pattern", "rewritten"), [
        (r"\bmlx\d|infiniband", r"m(?<!\wm)lx\d|infiniband"),
        (r"\b(?:no|zero) errors\b|deprecat",
         r"n(?<!\wn)o errors\b|z(?<!\wz)ero errors\b|deprecat"),
        (r"(?i)\bretry", r"(?i)r(?<!\wr)etry"),
        # left alone: a class, a quantified group, a named group, an escape first
        (r"[|(]x|\b[a]b", r"[|(]x|\b[a]b"),
        (r"\b(?:a|b)?c", r"\b(?:a|b)?c"),
        (r"\b(?:(?P<n>a)|b)c", r"\b(?:(?P<n>a)|b)c"),
        (r"\b\d+|x(?:a|b)", r"\b\d+|x(?:a|b)"),
    ])
    def test_the_rewriting(self, pattern: str, rewritten: str) -> None:
        assert rewritten == literal_first(pattern)

    @pytest.mark.parametrize(("name", "words"), REWRITTEN, ids=[n for n, _w in REWRITTEN])
    def test_every_alternative_starts_with_a_literal(self, name: str, words: str) -> None:
        """What makes ``re`` skip ahead: no alternative is left starting with a boundary."""
        assert not any(alt.startswith("\\b") for alt in literal_first(words).split("|")), name

    @pytest.mark.parametrize(("name", "words"), REWRITTEN, ids=[n for n, _w in REWRITTEN])
    def test_the_same_matches_on_every_line_of_the_corpora(self, name: str,
                                                            words: str) -> None:
        written, rewritten = re.compile(words), re.compile(literal_first(words))
        lines = corpus_lines()
        assert len(lines) > 3000

        for line in (*lines, *(line.lower() for line in lines)):
            a, b = written.search(line), rewritten.search(line)
            assert (a and a.span()) == (b and b.span()), (name, line)

    def test_lowercase_patterns_on_lowercased_lines_as_case_insensitive_ones(self) -> None:
        """``(?i)`` defeats the skipping: the record words match the lowercased message."""
        cases = [(detector.EXIT_WORDS, detector._EXIT_RE),
                 (detector.STRONG_WORDS, detector._STRONG_RE),
                 (detector.BENIGN_WORDS, detector._BENIGN_RECORD_RE)]
        hits = 0
        for words, compiled in cases:
            insensitive = re.compile("(?i)" + words)
            for line in corpus_lines():
                expected = insensitive.search(line) is not None
                assert expected == (compiled.search(line.lower()) is not None), line
                hits += expected
        assert hits > 50

    def test_ended_and_continued_as_the_single_patterns_they_replace(self) -> None:
        was_ended = re.compile(tracebacks.ENDED_WORDS + r"|^Killed\b|^Aborted\b")
        was_continued = re.compile("(?i)" + tracebacks.CONTINUED_WORDS + r"|^ok$|^\.{1,80}$")
        lines = [*corpus_lines(), "Killed", "Aborted (core dumped)", "OK", "ok", "....", "."]
        for line in lines:
            assert (was_ended.search(line) is not None) == tracebacks.ended(line), line
            assert (was_continued.search(line) is not None) == tracebacks.continued(line), line
        assert sum(tracebacks.ended(line) for line in lines) > 20
        assert sum(tracebacks.continued(line) for line in lines) > 20


class TestLevelsOutsideTheUsualPlace:
    """Formats whose level is not at the start, or that have no level at all."""

    @pytest.mark.parametrize(("line", "level", "source"), [
        ("[1641461840.238519] [c-96-4-worker0001:3595 :0] rc_iface.c:492 UCX ERROR "
         "ibv_create_srq() failed: Operation not supported", "error", "rc_iface.c"),
        ("[1700000000.000001] [gpu7:81:1] ucp_worker.c:1720 UCX FATAL failed to allocate "
         "memory pool", "fatal", "ucp_worker.c"),
        ("[c-96-4-worker0001:03640] pml_ucx.c:291 Error: Failed to create UCP worker", "error",
         "pml_ucx.c"),
        ("[node3:12345] btl_tcp_endpoint.cpp:626 Error: connect() to 10.0.0.2 failed",
         "error", "btl_tcp_endpoint.cpp"),
    ], ids=lambda v: v[:40])
    def test_a_level_after_a_c_source_location(self, line: str, level: str,
                                               source: str) -> None:
        """UCX (``file.c:NN MODULE LEVEL``) and Open MPI (``file.c:NN Error:``) put the level
        after the location that printed it."""
        record = parse_record(line)

        assert record is not None
        assert (level, source, "interconnect") == (record.level, record.source,
                                                   classify(record))

    def test_ucc_names_its_module_in_two_lowercase_words(self) -> None:
        """UCC's ``cuda mc ERROR`` after the location, as UCX's ``UCX ERROR``."""
        record = parse_record("[1623346743.056999] [sunnyvale:56373:0] mc_cuda_wait_kernel.cu:44"
                              "   cuda mc ERROR cuda failed with ret:400(invalid resource handle)")

        assert record is not None
        assert ("error", "mc_cuda_wait_kernel.cu") == (record.level, record.source)

    @pytest.mark.parametrize(("line", "level"), [
        ("libfabric:451707:1708520807::efa:cq:efa_rdm_txe_handle_error():737<warn> err: 5, "
         "message: Invalid address (7)", "error"),
        ("libfabric:9:1700000000::efa:ep_ctrl:efa_rdm_ep_open():301<warn> Failed to create "
         "shm endpoint", "error"),
        ("libfabric:1234:1700000000::core:core:fi_getinfo_():1020<warn> fi_getinfo: provider "
         "verbs returned -61 (No data available)", "warning"),
        ("libfabric:1234:1700000000::efa:core:efa_prov_info_set():95<info> using default "
         "values", "info"),
        ("libfabric:efa:cq:rxr_cq_handle_error():120<warn> unable to write error entry",
         "error"),
        # written by a teardown function: the job is ending, not failing
        ("libfabric:132:1787839803::cxi:ep_ctrl:cxip_ep_close():869<warn> gpua001: Unable to "
         "free EP object -16 : Device or resource busy", "warning"),
    ], ids=lambda v: v[:60])
    def test_libfabric_warn_records_that_report_an_error_status_are_errors(
            self, line: str, level: str) -> None:
        """libfabric has no error level (warn is its highest): its errors are warn records
        that report an error status; other warn records stay warnings."""
        record = parse_any(line)

        assert record is not None
        assert level == record.level
        assert "interconnect" == classify(record)

    @pytest.mark.parametrize("line", [
        "2018/11/27 03:44:27 Could not start device plugin: context deadline exceeded",
        "2024/01/02 10:00:00.123456 main.go:88: Failed to initialize NVML: "
        "ERROR_LIBRARY_NOT_FOUND",
        "2024/01/02 10:00:00 Unable to mount /data on node7: permission denied",
        "2024/01/02 10:00:00 Cannot open checkpoint shard 3: input/output error",
        "2024-01-02T10:00:00.123Z Failed to connect to the rendezvous store: connection reset",
        "[2024-01-02 10:00:00,123] Unable to open /dev/infiniband/uverbs0: no such device",
        "2024/01/02 10:00:00 GRPC server crashed with error: accept4: too many open files",
        "2024/01/02 10:00:00 checkpoint writer failed: input/output error",
        "2024/01/02 10:00:00 worker 3 aborted with exit code 134: core dumped",
    ], ids=lambda v: v[20:50])
    def test_a_levelless_stamped_line_that_states_a_failure_and_its_cause(
            self, line: str) -> None:
        """Go's standard log (and any stamp with no level) has no level: a message that says a
        failure in its first words and names the cause after a colon is an error."""
        record = parse_record(line)

        assert record is not None
        assert ("error", "statement") == (record.level, record.form)

    @pytest.mark.parametrize("line", [
        "2018/11/27 03:43:50 Loading NVML",
        "2018/11/27 03:44:00 Starting to serve on /var/lib/kubelet/device-plugins/nvidia.sock",
        "2018/11/27 03:44:13 Could not contact Kubelet, retrying. Did you enable the device "
        "plugin feature gate?",
        "2024/01/02 10:00:00 Failed to find the optional config",
        "2024/01/02 10:00:00 retry 3 of the job that Could not start: gone",
        "Could not start device plugin: context deadline exceeded (quoted in a README)",
        "2024-01-02 10:00:00 Failed to load the fused Adam kernel: not built, falling back to "
        "the PyTorch one",
        "2024-01-02 10:00:00 Could not find optional plugin libnccl-net.so: skipping",
        "2024/01/02 10:00:00 health probe failed: ignoring, the next probe decides",
        "2024/01/02 10:00:00 number of requests that failed: 0",
        "2024/01/02 10:00:00 the build that crashed yesterday is fixed",
    ], ids=lambda v: v[:50])
    def test_other_levelless_lines_are_not_records(self, line: str) -> None:
        """No failure in the first words, no cause named, no stamp, or a fallback."""
        record = parse_any(line)

        assert record is None or record.form != "statement"

    def test_a_repeated_go_log_failure_is_one_warning_of_its_component(self) -> None:
        """The device plugin (a Kubernetes node component) cannot start, again and again."""
        found = generic_scan(text_of('''
            2018/11/27 03:44:00 Starting to serve on /var/lib/kubelet/device-plugins/nvidia.sock
            2018/11/27 03:44:27 Could not start device plugin: context deadline exceeded
            2018/11/27 03:44:27 Could not contact Kubelet, retrying. Did you enable the device plugin feature gate?
            2018/11/27 03:45:15 Could not start device plugin: context deadline exceeded
            '''))

        record = only(found, RECORD)
        assert Severity.WARNING == record.severity
        assert "container_runtime" == dict(record.captures)["component"]

    @pytest.mark.parametrize(("line", "source", "message"), [
        ("May 23 12:49:52 mgmt1 slurmctld[80708]: slurmctld: error: Setting node gpu1 state to "
         "INVAL", "slurmctld", "Setting node gpu1 state to INVAL"),
        ("Feb 22 17:46:38 ip-10-1-74-228 slurmd[13562]: spank-epilog: error: pyxis: mkdir: "
         "failed", "spank-epilog", "pyxis: mkdir: failed"),
        ("2024-05-01T10:00:00.123+00:00 gpu7 kubelet[999]: E0501 10:00:00.123456  999 "
         "pod_workers.go:12] Error syncing pod", "pod_workers.go", "Error syncing pod"),
    ], ids=lambda v: v[:30])
    def test_a_record_behind_a_syslog_files_header(self, line: str, source: str,
                                                    message: str) -> None:
        """/var/log/syslog and kern.log put a stamp, the host and the program first."""
        record = parse_record(line)

        assert record is not None
        assert (source, message) == (record.source, record.message)

    def test_lowercase_levels_between_pipes_after_a_stamp(self) -> None:
        """Loguru-style columns of C++ loggers (Tenstorrent's), the level in lowercase."""
        record = parse_record("2025-11-26 19:48:22.915 | critical |          Always | TT_FATAL: "
                              "Out of Memory: Not enough space to allocate 131072000 B DRAM")

        assert record is not None
        assert ("fatal", "Always", "accelerator_runtime") == (record.level, record.source,
                                                              classify(record))

    @pytest.mark.parametrize("line", ["name | error | value", "| error | x |",
                                      "2025-11-26 19:48:20.892 | info | Test | selected"])
    def test_a_table_with_an_error_column_is_not_a_record(self, line: str) -> None:
        """Without a time of day first, pipes are a table's; info is not an error."""
        assert parse_record(line) is None

    def test_logging_basic_format_behind_a_collectors_stamp(self) -> None:
        """CloudWatch (and other collectors) put a stamp and a tab before ``ERROR:name:msg``:
        the logger is still the source, and torch.distributed.elastic is the launcher."""
        severity, captures = _record(
            "2023-03-09T10:53:23.670-05:00\tERROR:torch.distributed.elastic.agent.server.api:"
            "Error waiting on exit barrier. Elapsed: 315.7792458534241 seconds")

        assert Severity.WARNING == severity
        assert ("scheduler", "torch.distributed.elastic.agent.server.api") == (
            captures["component"], captures["source"])
        assert captures["template"].startswith("Error waiting on exit barrier")

    def test_colours_escaped_by_rsyslog_are_removed_before_reading(self) -> None:
        """rsyslog writes ESC as ``#033``: Ray's coloured prefix must not hide its record."""
        severity, captures = _record(
            "#033[2m#033[33m(raylet)#033[0m [2023-09-25 10:00:00,123 E 812 812] (raylet) "
            "node_manager.cc:3007: 2 Workers (tasks / actors) killed due to memory pressure "
            "(OOM)")

        assert Severity.WARNING == severity
        assert "node_manager.cc" == captures["source"]


class TestCloudLogViewerLines:
    """Google Cloud's log viewer shows every line a Vertex AI replica wrote to stderr at ERROR:
    the level is the message's own."""

    def test_progress_and_notices_on_stderr_are_not_errors(self) -> None:
        found = generic_scan(text_of('''
            ERROR   2022-01-26 14:19:34 +1100       workerpool0-0    31%|###       | 5974/19120 [31:21<59:25,  3.69it/s]
            ERROR   2022-01-26 14:19:41 +1100       workerpool0-0   Configuration saved in /tmp/xlm-roberta-large/checkpoint-6000/config.json
            INFO    2022-01-26 14:19:41 +1100       workerpool0-0   {'loss': 5.3862, 'learning_rate': 1.37e-05, 'epoch': 3.14}
            '''))

        assert [] == loud(found)

    def test_a_record_with_its_own_error_level_in_the_message_is_read(self) -> None:
        record = parse_record("ERROR   2022-01-26 14:19:41 +1100       workerpool0-0   "
                              "2022-01-26 14:19:41,000 - train - ERROR - upload failed: denied")

        assert record is not None
        assert ("error", "train") == (record.level, record.source)


class TestKernelDriverLines:
    """The kernel log carries no level in its text: a line of an accelerator's or an
    interconnect's driver that says something failed, timed out or hung is an error record of
    that component; the same drivers' boot noise stays quiet."""

    @pytest.mark.parametrize(("line", "component"), [
        ("[75287.322369] amdgpu: Failed to evict process queues", "accelerator_runtime"),
        ("[75287.322370] amdgpu 0000:03:00.0: amdgpu: Failed to quiesce KFD",
         "accelerator_runtime"),
        ("kernel: NVRM: GPU0 _issueRpcAndWait: rpcSendMessage failed with status 0x0000000f",
         "accelerator_runtime"),
        ("mlx5_core 0000:61:00.0: wait_func:1132:(pid 141181): CREATE_DCT(0x710) timeout. "
         "Will cause a leak of a command resource", "interconnect"),
        ("Dec 13 13:46:08 gpu-7 kernel: [  12.345678] infiniband mlx5_3: mlx5_poll_one:527:(pid "
         "0): Responder error cqe on cqn 0x406:", "interconnect"),
    ])
    def test_a_drivers_failure_is_a_warning_of_its_component(self, line: str,
                                                             component: str) -> None:
        severity, captures = _record(line)

        assert Severity.WARNING == severity
        assert component == captures["component"]

    @pytest.mark.parametrize("line", [
        "[    5.123456] nvidia: module verification failed: signature and/or required key "
        "missing - tainting kernel",
        "[    6.000000] mlx5_core 0000:61:00.0: mlx5_cmd_out_err:838:(pid 1): ACCESS_REG(0x805) "
        "op_mod(0x1) failed, status bad parameter(0x3), syndrome (0x6c4d4)",
        "[    7.000000] amdgpu 0000:c1:00.0: amdgpu: Secure display: Generic Failure.",
        "[    8.000000] amdgpu 0000:c1:00.0: amdgpu: SMU is initialized successfully!",
        "[    9.000000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.54.14",
        "[   10.000000] nvme nvme0: I/O 12 QID 3 timeout, aborting",  # not a training driver
        "[   11.000000] infiniband mlx5_0: port 1 link errors: 0",
    ])
    def test_their_boot_noise_and_other_drivers_stay_quiet(self, line: str) -> None:
        assert [] == loud(generic_scan(line + "\n"))


class TestKernelWarningsAndPowerVrDriverRecords:
    """The kernel's warning splat in a GPU or HCA driver's module is that driver reaching a state
    it asserts never happens; Moore Threads' driver (PowerVR-derived) writes its own level. A
    splat in another module (a display's) stays a plain warning, which pages nobody."""

    @pytest.mark.parametrize("line", [
        "[234620.923027] WARNING: CPU: 25 PID: 550 at /var/lib/dkms/mtgpu/1.0.0/build/src/pvr/"
        "osfunc.c:1191 OSWarnOn+0xf/0x20 [mtgpu]",
        "kernel: WARNING: CPU: 3 PID: 7731 at /var/lib/dkms/nvidia/535.104.05/build/nvidia/"
        "nv.c:4051 nv_pci_remove+0x2a1/0x330 [nvidia]",
        "[24078.925037] MTGPU:(Error): 56377:  PID 1747 experienced error Guilty Lockup (0x1) "
        "caller[CheckFWCCB CTX Reset Noticication] [188]",
    ])
    def test_a_gpu_drivers_warning_splat_or_error_is_an_accelerator_warning(
            self, line: str) -> None:
        severity, captures = _record(line)

        assert Severity.WARNING == severity
        assert "accelerator_runtime" == captures["component"]

    def test_a_splat_in_another_module_stays_quiet(self) -> None:
        assert [] == loud(generic_scan(
            "[   12.300000] WARNING: CPU: 3 PID: 1 at drivers/gpu/drm/drm_edid.c:123 "
            "drm_edid_block_valid+0x1/0x2 [drm]\n"))


class TestNvidiaCompilerTools:
    """ptxas, nvcc and nvlink print ``<tool> fatal   : message`` (and ``error``) when a kernel
    cannot be built for this GPU: at a job's start, or when Triton or XLA compile one."""

    def test_a_fatal_ptxas_line_is_a_fatal_record_of_the_accelerator_runtime(self) -> None:
        severity, captures = _record(
            "ptxas-blackwell fatal   : Value 'sm_110a' is not defined for option 'gpu-name'")

        assert Severity.ERROR == severity
        assert ("accelerator_runtime", "fatal") == (captures["component"], captures["level"])

    def test_its_information_lines_are_not_records(self) -> None:
        assert parse_any("ptxas info    : Used 32 registers, 384 bytes cmem[0]") is None


class TestXlaAutotunerNotices:
    """XLA's GPU autotuner logs at E level the device and every difference between two
    algorithms' results, then picks one and goes on (danijar/dreamerv3 #19, a healthy run)."""

    def test_its_error_level_lines_stay_quiet(self) -> None:
        assert [] == loud(generic_scan(text_of('''
            2023-02-26 17:20:25.279528: E external/org_tensorflow/tensorflow/compiler/xla/service/gpu/gpu_conv_algorithm_picker.cc:265] cudnn version: 8.7.0
            2023-02-26 17:20:25.287494: E external/org_tensorflow/tensorflow/compiler/xla/service/gpu/buffer_comparator.cc:731] Difference at 11: 3100 vs 2786
            2024-05-01 12:03:32.956935: E external/xla/xla/service/gpu/conv_algorithm_picker.cc:307] Device: NVIDIA RTX 6000 Ada Generation
            ''')))

    def test_another_xla_source_at_error_level_is_still_read(self) -> None:
        severity, _captures = _record(
            "2024-05-01 12:03:33.000000: E external/xla/xla/service/gpu/gpu_executable.cc:90] "
            "INTERNAL: Failed to launch CUDA kernel: CUDA_ERROR_ILLEGAL_ADDRESS")

        assert Severity.WARNING == severity


class TestHipRuntimeLog:
    """AMD's HIP runtime with AMD_LOG_LEVEL set writes ``:LEVEL:file.cpp :line: time us:``:
    level 1 is an error of the accelerator runtime, 3 and 4 are information."""

    def test_a_level_one_line_is_an_error_of_the_accelerator_runtime(self) -> None:
        severity, captures = _record(
            ":1:memory.cpp               :347 : 9616777840 us: 4277 : [tid:0x7f2accbfe6c0] "
            "Video memory allocation failed!")

        assert Severity.WARNING == severity
        assert "accelerator_runtime" == captures["component"]

    def test_a_level_three_line_is_information(self) -> None:
        record = parse_any(":3:hip_device_runtime.cpp   :699 : 8051875969 us: [pid:73665 tid: "
                           "0x7f49326c11c0] hipGetDevice: Returned hipSuccess : 0")

        assert record is not None
        assert ("info", "rocclr") == (record.level, record.form)


class TestOpenMpiRuntimeRecords:
    """Open MPI's runtime (ORTE, PRRTE, PMIx, OPAL) and launchers belong to the collective
    vocabulary: their error records are warnings; their deprecation notices stay quiet."""

    @pytest.mark.parametrize("line", [
        "[worker:15806] PRTE ERROR: Bad parameter in file base/odls_base_default_fns.c at "
        "line 962",
        "[gpu-node-3:00412] PMIX ERROR: UNREACHABLE in file server/pmix_server.c at line 2795",
        "[n1:2211] [[61284,0],0] ORTE_ERROR_LOG: Not found in file "
        "base/plm_base_launch_support.c at line 1234",
        "[host:77] [[INVALID],INVALID] ORTE_ERROR_LOG: A system-required executable either "
        "could not be found or was not executable by this user in file "
        "ess_singleton_module.c at line 388",
    ], ids=lambda v: v[:40])
    def test_an_open_mpi_runtime_error_record_is_a_collective_warning(self, line: str) -> None:
        """``PRTE ERROR`` and ``PMIX ERROR`` are headers of their error macros;
        ``ORTE_ERROR_LOG:`` is the macro's own name, read as an error."""
        severity, captures = _record(line)

        assert (Severity.WARNING, "collective") == (severity, captures["component"])

    @pytest.mark.parametrize("line", [
        "ERROR:launch:mpirun noticed that process rank 3 on node n4 exited on signal 9",
        "ERROR:x:MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD",
        "ERROR:x:mpiexec: HYDRA_launch failed",
        "ERROR:x:[n1:22] OPAL_ERROR_LOG: Error in file pmix.c at line 4",
    ], ids=lambda v: v[:40])
    def test_its_launchers_and_abort_are_collective_words(self, line: str) -> None:
        record = parse_any(line)

        assert record is not None and "collective" == classify(record)

    @pytest.mark.parametrize("line", [
        "[worker:15806] PRTE INFO: launching 8 daemons",
        "ERROR:x:the report mentions sportes and prtest fixtures",
    ], ids=lambda v: v[:30])
    def test_other_levels_and_words_containing_the_names_are_not(self, line: str) -> None:
        record = parse_any(line)

        assert record is None or record.level not in ("error", "fatal") or (
            "collective" != classify(record))

    def test_the_deprecated_mpi_info_key_notice_makes_nothing(self) -> None:
        """Open MPI's banner says the key "will be treated / as an error in a future release":
        prose mentioning an error is not a record, even when a traceback follows."""
        found = generic_scan(text_of('''
            WARNING: A deprecated MPI_Info key was used.

              Deprecated key:   env
              Corrected key:    PMIX_ENVAR

            We have updated this for you and will proceed. However, this will be treated
            as an error in a future release. Please update your application.
            Traceback (most recent call last):
            '''))

        assert [] == found

    @pytest.mark.parametrize("line", [
        "as an error in a future release. Please update your application.",
        "an error occurred while the banner was printed",
        "is an error only when the flag is set",
        "raise an error if the key is missing",
    ], ids=lambda v: v[:30])
    def test_prose_that_mentions_an_error_is_not_a_component_error(self, line: str) -> None:
        assert parse_any(line) is None

    @pytest.mark.parametrize("line", [
        "HCCL demo error: notify wait timeout",
        "CUDA runtime error (59) : device-side assert triggered",
        "MIOpen(HIP): Error [BuildOcl] build failed",
    ], ids=lambda v: v[:30])
    def test_a_components_own_error_line_is_still_read(self, line: str) -> None:
        record = parse_any(line)

        assert record is not None and "component" == record.form


class TestAcceleratorMemoryExhaustion:
    """An accelerator runtime saying in its own words that its memory ran out: an error
    record of an otherwise unnamed component is about the accelerator, and a warning."""

    @pytest.mark.parametrize("line", [
        "[ERROR] PRE_ACT(54175,fffdbcff91e0,python):2024-10-22-11:24:55.301.443 "
        "[mindspore/ccsrc/backend/common/mem_reuse/mem_dynamic_allocator.cc:392] "
        "AddMemBlockAndMemBufByEagerFree] TotalUsedMemStatistics : 29356337664 plus "
        "TotalUsedByEventMemStatistics : 0 and plus alloc size : 301990400 is more than total "
        "mem size : 29464985600.",
        "[ERROR] PRE_ACT(1,f,python):2024-10-22-11:24:55.301.443 [allocator.cc:12] Alloc] "
        "used size 31 GB exceeds total mem 30 GB",
        "2024-01-01 10:00:00 - engine - ERROR - Malloc 2147483648 bytes on stream 3 failed",
        "ERROR:pool:alloc 512 MB of workspace memory failed, ret = 207001",
        "ERROR:pool:memory allocation of 4096 blocks failed",
        "ERROR:pool:failed to allocate 2.00 GiB of memory for the KV cache",
        "[ERROR] PRE_ACT(1,f,python):2024-01-01-00:00:00.000.000 [a.cc:1] Run] Out of Memory!!!",
        "ERROR:engine:Device memory isn't enough and alloc failed, kernel name: MatMul",
        "ERROR:engine:not enough memory for the activations of layer 12",
        "ERROR:推理:分配失败, 显存不足",
        "ERROR:推理:内存不足, 请减小 batch size",
        "[ERROR] PRE_ACT(1,f,python):2024-01-01-00:00:00.000.000 [a.cc:1] Alloc] 申请显存失败, "
        "size: 4096",
        "ERROR:推理:已用大小超过总显存",
    ], ids=lambda v: v[-40:])
    def test_memory_exhaustion_in_the_runtimes_words_is_accelerator_memory(
            self, line: str) -> None:
        severity, captures = _record(line)

        assert (Severity.WARNING, "accelerator_runtime") == (severity, captures["component"])

    @pytest.mark.parametrize("line", [
        "ERROR:loader:host memory allocation failed for the prefetch buffer",
        "ERROR:loader:out of memory: the cgroup limit of 64 GiB was reached",
        "ERROR:loader:cpu memory is not enough to unpack the shard",
        "ERROR:config:the memory limit is more than the node's total cores",
        "ERROR:config:allocation of port 29500 failed",
        "ERROR:config:memory usage is 3 GiB of 80 GiB",
    ], ids=lambda v: v[:40])
    def test_host_memory_and_other_allocations_are_not_accelerator_memory(
            self, line: str) -> None:
        record = parse_record(line)

        assert record is not None
        assert "accelerator_runtime" != classify(record)


class TestRecordBeforeATraceback:
    """An error record on the line just before a Python traceback is that failure's report:
    a warning even when the traceback is cut before its exception (an excerpt, a log cut
    mid-report), and whatever its component."""

    def test_an_unknown_components_record_before_a_cut_traceback_is_a_warning(self) -> None:
        found = generic_scan(text_of('''
            ERROR:app:could not parse optional field 'notes'
            Traceback (most recent call last):
              File "/data/run.py", line 17, in <module>
                outputs = model.generate(**input_ids)
            '''))

        record = only(found, RECORD)
        assert Severity.WARNING == record.severity
        assert ("followed by", "Traceback (most recent call last):") in record.facts

    def test_a_record_lines_before_a_traceback_still_waits_for_the_process_to_end(self) -> None:
        """A line between them: the traceback may be another matter (it is read on its own,
        and the record rises only if the process ends)."""
        found = generic_scan(text_of('''
            ERROR:app:could not parse optional field 'notes'
            step 12 loss 2.0
            Traceback (most recent call last):
            '''))

        assert Severity.INFO == only(found, RECORD).severity

    def test_a_warning_record_before_a_traceback_makes_nothing(self) -> None:
        found = generic_scan(text_of('''
            WARNING:app:could not parse optional field 'notes'
            Traceback (most recent call last):
            '''))

        assert [] == [d for d in found if d.signature == RECORD]


class TestFailureWordsThatNameFigures:
    """A trainer that calls a metric ``val_error`` prints it on every step: such a line, and a
    timeout set to a number, start no shape; a count, an exception or a level beside them do."""

    @pytest.mark.parametrize("line", [
        "      5 train_loss=0.7513 val_error=0.1930",
        "1/10 - 2s - 12ms/step - loss: 0.41 - mean_absolute_error: 0.12",
        "[epoch 3/90] val: loss=0.31 mIoU=0.71 pixel_error=0.032",
        "2024-06-02 23:22:54,413 - INFO - train.py:28 - timeout for collective set to 1800 seconds",
        "gpu-a1-3:4567:4567 [0] NCCL INFO NCCL_IB_TIMEOUT set by environment to 22.",
    ])
    def test_a_line_whose_failure_words_only_name_figures_starts_no_shape(self,
                                                                         line: str) -> None:
        assert detector._selected(line)  # the interests do select it
        assert not detector._may_start_shape(line)

    @pytest.mark.parametrize("line", [
        "ecc_errors=2 retired_pages=1",  # a count: a check may read it
        "val_error=0.19 RuntimeError: CUDA error: an illegal memory access was encountered",
        "2024-06-02 10:00:00,123 - ERROR - train.py:28 - val_error=0.19 and the step failed",
        "KeyError: 0",
        "collective operation timeout: WorkNCCL(SeqNum=5) ran for 1800046 milliseconds",
    ])
    def test_other_failure_words_on_the_line_still_start_shapes(self, line: str) -> None:
        assert detector._may_start_shape(line)

    def test_metric_lines_in_a_log_raise_nothing_and_a_real_error_after_them_still_does(
            self) -> None:
        log = "".join(f"  {i} train_loss=0.75 val_error=0.19\n" for i in range(50))
        log += "2024-06-02 10:00:00,123 - ERROR - train.py:28 - checkpoint upload failed\n"
        found = generic_scan(log)
        assert [d.signature for d in found] == [RECORD]
