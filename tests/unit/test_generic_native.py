"""The generic layer's second shape: a native crash, however it is printed.

Fatal signals and aborts as glog/absl, faulthandler, the C runtime, shells, the Go and Rust
runtimes and launchers report them; a child that died of a signal. A stop someone asked for
(SIGTERM, Ctrl-C) is not a crash. These run the generic layer alone (no signatures).
"""

from __future__ import annotations

import pytest
from support.generic import corpus_lines, generic_scan, loud, only, text_of

from sigwatch.detectors.generic import native
from sigwatch.model import Severity

CRASH = "generic_native_crash"


def _crash(text: str) -> dict[str, str]:
    d = only(generic_scan(text), CRASH)
    assert Severity.ERROR == d.severity
    return dict(d.captures)


class TestFatalSignalsAsToolsPrintThem:
    @pytest.mark.parametrize(("line", "signal"), [
        ("*** SIGSEGV received at time=1716537012 on cpu 7 ***", "SIGSEGV"),
        ('*** Aborted at 1716537012 (unix time) try "date -d @1716537012" if you are using GNU '
         "date ***", "SIGABRT"),
        ("*** SIGABRT (@0x3e800001f5a) received by PID 8026 (TID 0x7f3a) from PID 8026; stack "
         "trace: ***", "SIGABRT"),
        ("Segmentation fault (core dumped)", "SIGSEGV"),
        ("Bus error (core dumped)", "SIGBUS"),
        ("Floating point exception (core dumped)", "SIGFPE"),
        ("Illegal instruction (core dumped)", "SIGILL"),
        ("Aborted (core dumped)", "SIGABRT"),
        ("Killed", "SIGKILL"),
        ("/var/spool/slurmd/job1234/slurm_script: line 14: 88213 Killed   python train.py",
         "SIGKILL"),
        ("./run.sh: line 34: 147149 Segmentation fault      (core dumped) singularity exec "
         "img.sif python3 train.py", "SIGSEGV"),
        ("zsh: segmentation fault (core dumped)  python train.py", "SIGSEGV"),
        ("[1]    2964311 abort (core dumped)  python test.py", "SIGABRT"),
        ("[1]    46252 IOT instruction  blaze-bin/third_party/gpus/cutlass/test/batched_gemv",
         "SIGABRT"),  # zsh's name for SIGIOT, which is SIGABRT
        ("0: Program received signal SIGSEGV: Segmentation fault - invalid memory reference.",
         "SIGSEGV"),
        ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", "SIGKILL"),
    ], ids=lambda v: v[:40] if isinstance(v, str) else v)
    def test_signal_reports_name_the_signal(self, line: str, signal: str) -> None:
        """Each form is a crash (error) naming its signal."""
        assert signal == _crash(line + "\n")["signal"]

    @pytest.mark.parametrize(("line", "signal"), [
        ("Child process 4411 exited with signal 9", "SIGKILL"),
        ("subprocess.CalledProcessError: Command 'nvcc' died with <Signals.SIGKILL: 9>.",
         "SIGKILL"),
        ("  exitcode  : -9 (pid: 14750)", "SIGKILL"),
        ("  traceback : Signal 6 (SIGABRT) received by PID 221203", "SIGABRT"),
        ("mpirun noticed that process rank 5 with PID 2233 on node gpu-3 exited on signal 11 "
         "(Segmentation fault).", "SIGSEGV"),
        ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal "
         "SIGKILL", "SIGKILL"),
        ("Error: Process completed with exit code 139.", "SIGSEGV"),
        ("Job exited with error code 137", "SIGKILL"),
        ("[dsw-541920-5fd5c64bc4-m25b4:02519] Signal: Segmentation fault (11)", "SIGSEGV"),
        ("[gpu-3:4411] Signal: Bus error (7)", "SIGBUS"),
        ("[12345.678] Memory cgroup out of memory: Killed process 140339 (python3) "
         "total-vm:120832kB, anon-rss:15596kB", "SIGKILL"),
        ("systemd[1]: trainer.service: Main process exited, code=killed, status=9/KILL",
         "SIGKILL"),
        ("    Reason:       OOMKilled", "SIGKILL"),
        ("[77810.541290] python[29021]: segfault at 0 ip 00007f6b2c1a3e21 sp 00007ffd5b3b0a50 "
         "error 4 in libtorch_cuda.so[7f6b2a000000+4b000000]", "SIGSEGV"),
        ("[12.000000] traps: python3[4411] general protection fault ip:7f3a1c2b sp:7ffc9a10 "
         "error:0 in libc.so.6[7f3a1c000000+195000]", "SIGSEGV"),
        ("[12.000000] traps: trainer[4411] trap divide error ip:55d1 sp:7ffc error:0 in "
         "trainer[55d0+1000]", "SIGFPE"),
    ], ids=lambda v: v[:40] if isinstance(v, str) else v)
    def test_children_that_die_of_a_signal(self, line: str, signal: str) -> None:
        """Launchers, schedulers and runtimes reporting a child killed by a signal."""
        assert signal == _crash(line + "\n")["signal"]


class TestAbortsAndFailedChecks:
    def test_terminate_called_names_the_exception_and_what(self) -> None:
        """The C++ runtime's abort on an uncaught exception; ``what()`` is the next line."""
        captures = _crash(text_of('''
            terminate called after throwing an instance of 'c10::Error'
              what():  CUDA error: device-side assert triggered
            '''))

        assert {"kind": "abort", "signal": "SIGABRT",
                "what": "CUDA error: device-side assert triggered"} == captures

    @pytest.mark.parametrize("line", [
        "F0904 14:25:50.808766  6518 worker_pool.cc:364] Check failed: port > 0 (0 vs. 0)",
        "[libprotobuf FATAL google/protobuf/message_lite.cc:68] CHECK failed: (byte_size) <= "
        "(INT_MAX): ",
        "python: /src/csrc/ops.cu:88: void run(): Assertion `n > 0' failed.",
        "machine:rank1: Assertion failure at psm3/ptl_am/ptl.c:196: nbytes == req->recv_msglen",
        "double free or corruption (out)",
        "*** stack smashing detected ***: terminated",
        "[gpu001:00000] *** An error occurred in MPI_Init",
        "Abort(271763599) on node 7 (rank 7 in comm 0): Fatal error in internal_Send",
        "libc++abi: terminating due to uncaught exception of type cutlass::cuda_exception: "
        "std::exception",
    ], ids=lambda v: v[:40])
    def test_aborts_and_failed_checks_are_crashes(self, line: str) -> None:
        """glog CHECK, protobuf CHECK, assert(), glibc's heap checks, MPI's error handlers,
        LLVM's C++ runtime (libc++abi) terminating on an uncaught exception."""
        assert _crash(line + "\n")["kind"] in ("check", "abort")

    @pytest.mark.parametrize("line", [
        "panic: runtime error: invalid memory address or nil pointer dereference",
        "fatal error: all goroutines are asleep - deadlock!",
        "thread '<unnamed>' panicked at 'called `Result::unwrap()` on an `Err` value', "
        "src/tokenizer.rs:12:5",
        "thread 'DSD-4-0' (33548) panicked at C:\\Users\\u\\.cargo\\git\\checkouts\\cubecl-"
        "058c\\crates\\cubecl-wgpu\\src\\compute\\server.rs:347:35:",
        "2024-07-22T15:14:58.817491Z ERROR burn_train::learner::application_logger: PANIC => "
        "panicked at crates/burn-wgpu/src/runtime.rs:329:17:",
        'Exception in thread "main" java.lang.OutOfMemoryError: Java heap space',
    ], ids=lambda v: v[:30])
    def test_other_runtimes_crash_reports(self, line: str) -> None:
        """Go's panic and fatal error, a Rust panic (since Rust 1.88 with the thread's id; a
        logger's record of one keeps only its location), an uncaught Java exception."""
        assert "runtime_panic" == _crash(line + "\n")["kind"]

    def test_faulthandler_names_the_innermost_user_frame(self) -> None:
        """``Fatal Python error`` and the current thread's frames, newest first."""
        found = generic_scan(text_of('''
            Fatal Python error: Segmentation fault

            Current thread 0x00007f4ebf9d3740 (most recent call first):
              File "/usr/lib/python3/dist-packages/torch/distributed/c10d_logger.py", line 79 in wrapper
              File "/job/model/attention.py", line 118 in forward
              File "/job/train.py", line 40 in step

            Thread 0x00007f4e31ffb640 (most recent call first):
              File "/usr/lib/python3.10/threading.py", line 324 in wait

            Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)
            '''))

        d = only(found, CRASH)
        assert Severity.ERROR == d.severity
        assert {"reason": "Segmentation fault",
                "frame": "/job/model/attention.py:118 in forward"} == dict(d.captures)


class TestOneCrashOneDetection:
    def test_the_lines_of_one_crash_make_one_detection(self) -> None:
        """A glog check failure, its stack and the shell's abort are one crash."""
        found = generic_scan(text_of('''
            F0512 10:00:00.000001  9123 dataset.cc:77] Check failed: fd >= 0
            *** Check failure stack trace: ***
                @     0x7f2b8c1d3a60  google::LogMessage::Fail()
                @     0x7f2b8c1d5b2e  google::LogMessage::SendToLog()
            Aborted (core dumped)
            '''))

        assert 1 == len([d for d in found if d.signature == CRASH])


class TestStopsThatAreNotCrashes:
    @pytest.mark.parametrize("line", [
        "Terminated",
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 812914 closing "
        "signal SIGTERM",
        "  exitcode  : -15 (pid: 14750)",
        "Exited with exit code 143",
    ], ids=lambda v: v[:30])
    def test_a_stop_request_is_information_only(self, line: str) -> None:
        """SIGTERM is a stop someone asked for (preemption, a launcher, a time limit)."""
        assert [] == loud(generic_scan(line + "\n"))

    @pytest.mark.parametrize("line", [
        "Killed 3 stale worker processes before restart",
        "INFO: Process exited with code 0",
        "exit code 130",
        "Aborted!",
    ], ids=lambda v: v[:30])
    def test_near_misses_are_quiet(self, line: str) -> None:
        """Words of a crash in a sentence, a clean exit, Ctrl-C (130), click's 'Aborted!'."""
        assert [] == loud(generic_scan(line + "\n"))


class TestChineseLocale:
    @pytest.mark.parametrize(("line", "signal"), [
        ("段错误 (核心已转储)", "SIGSEGV"),
        ("./train.sh: 行 14: 88213 已杀死   python train.py", "SIGKILL"),
        ("已放弃 (核心已转储)", "SIGABRT"),
        ("总线错误", "SIGBUS"),
        ("浮点数例外 (核心已转储)", "SIGFPE"),
        ("./chat.sh: 第 18 行： 57623 段错误               （核心已转储） ./main -m x.gguf", "SIGSEGV"),
    ], ids=lambda v: v[:12])
    def test_shell_reports_in_a_chinese_locale(self, line: str, signal: str) -> None:
        """glibc's and bash's zh_CN catalogues: the same reports, translated."""
        assert signal == _crash(line + "\n")["signal"]


def test_a_kernel_report_quoted_in_a_jobs_output_is_not_a_crash() -> None:
    """``segfault at ... ip`` is news where the kernel says it, not in a job's own log."""
    line = ("[77810.541290] python[29021]: segfault at 0 ip 00007f6b2c1a3e21 sp 00007ffd5b3b0a50 "
            "error 4 in libtorch_cuda.so\n")

    assert [] == loud(generic_scan(line, kind="file"))
    assert CRASH == only(generic_scan(line, kind="kmsg"), CRASH).signature


# Lines for each phrase of ``native._PHRASE_RES``, in its order (one per branch with its own
# literal in ``native._PHRASE_HINTS``).
PHRASE_EXAMPLES: list[tuple[str, ...]] = [
    ("W0828 22:53:47.001000 139822188226368 torch/distributed/elastic/agent/server/api.py:688]"
     " Received Signals.SIGHUP death signal, shutting down workers",
     "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15",
     "W1221 17:13:59.240000 46660 torch/distributed/elastic/agent/server/api.py:704] Received 1 "
     "death signal, shutting down workers"),
    ("terminate called after throwing an instance of 'c10::Error'",
     "terminate called recursively"),
    ("libc++abi: terminating due to uncaught exception of type std::runtime_error: boom",
     "libc++abi.dylib: terminating with uncaught exception of type c10::Error",
     "libc++abi: terminating"),
    ("double free or corruption (out)", "free(): invalid pointer",
     "munmap_chunk(): invalid pointer", "malloc(): corrupted top size",
     "corrupted size vs. prev_size", "*** stack smashing detected ***: terminated",
     "pure virtual method called"),
    ("*** SIGSEGV received at time=1716537012 on cpu 7 ***",),
    ("*** Aborted at 1716537012 (unix time) try \"date -d @1716537012\" if you are using GNU",),
    ("*** Check failure stack trace: ***",),
    ("F0522 10:00:00.000000  1234 graph.cc:12] Check failed: x == y (3 vs. 4)",
     "[F socket.cpp:42] CHECK failed: fd >= 0"),
    ('RuntimeError: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at '
     '"../aten/src/ATen/cuda/CUDAContext.cpp":50, please report a bug to PyTorch.',),
    ("python: malloc.c:2379: sysmalloc: Assertion `old_size == 0' failed.",),
    ("machine:rank1: Assertion failure at psm3/ptl_am/ptl.c:196: nbytes == req->recv_msglen",),
    ("Assertion failed in file src/mpid/ch4/src/init_comm.c at line 72: in_use == 0",
     "Assertion failed: ptr != NULL, file C:\\src\\loader.c, line 41"),
    ("Program received signal SIGSEGV, Segmentation fault.",
     'Thread 1 "python" received signal SIGABRT, Aborted.',
     "* thread #1, name = 'python', stop reason = signal SIGSEGV"),
    ("Signal 6 (SIGABRT) received by PID 4321",),
    ("SIGABRT(6), PID: 4119976, Thread 4119976:",),
    ("worker 3 exited with signal SIGKILL", "rank 2 was killed by signal 9",
     "x4009c5s4b0n0: rank 1 died from signal 7"),
    ("process 12 died with <Signals.SIGKILL: 9>",),
    ("[dsw-5fd5c64bc4-m25b4:02519] Signal: Segmentation fault (11)", "Signal: Aborted (6)"),
    ("2024-05-01 12:00:00 received signal SIGSEGV, terminating",),
    ("Signal (11) received.",),
    ("[inference-service-benchmark-645b5f89bb-n7mrp:6939 :0:10213] Caught signal 11 "
     "(Segmentation fault: address not mapped to object at address (nil))",),
    ("exitcode  : -9 (pid: 1234)", "returncode=-11"),
    ("Process exited with exit code 137", "return code 134",
     "Job exited with error code 137"),
    ("[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x45d2a1]",),
    ("SIGABRT",),
    ("SIGSEGV: segmentation violation", "2025-03-05 08:58:42 SIGABRT: abort"),
    ("!!!!!!! Segfault encountered !!!!!!!",),
    ("MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD",),
    ("*** An error occurred in MPI_Init_thread",
     "MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,",
     "Abort(1091215) on node 7 (rank 7 in comm 0): Fatal error in PMPI_Init_thread",
     "MPICH ERROR [Rank 0] [job id 410301.1] [Thu Feb 13 12:42:18 2025] [nid005414] - Abort(-1) "
     "(rank 0 in comm 0): MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but GTL library "
     "is not linked"),
    ("Out of memory: Killed process 4242 (python) total-vm:88123456kB, anon-rss:7123456kB",),
    ("python[4242]: segfault at 0 ip 00007f3a1c2b3d4e sp 00007ffd8a7b6c50 error 4 in libc.so",),
    ("traps: python[4242] general protection fault ip:7f3a1c2b3d4e sp:7ffd8a7b6c50 error:0",
     "traps: python[4242] trap divide error ip:7f3a1c2b3d4e sp:7ffd8a7b6c50 error:0",
     "traps: python[4242] trap invalid opcode ip:7f3a1c2b3d4e sp:7ffd8a7b6c50 error:0",
     "traps: python[4242] trap stack segment ip:7f3a1c2b3d4e sp:7ffd8a7b6c50 error:0",
     "traps: python[4242] trap int3 ip:7f3a1c2b3d4e sp:7ffd8a7b6c50 error:0"),
    ("train.service: Main process exited, code=killed, status=9/KILL",),
    ("train.service: Main process exited, code=exited, status=1/FAILURE",),
    ("      Reason:       OOMKilled",),
    ("Warning  BackOff  3m  kubelet  Back-off restarting failed container trainer",
     "trainer-0   0/1     CrashLoopBackOff   5 (2m ago)   10m"),
    ("torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 1)",
     "  exitcode  : 1 (pid: 1234)",
     "[ERROR] [launch.py:321:sigkill_handler] ['python', 'x.py'] exits with return code = 2",
     "Process 3 exit with status code 250.",
     "Container rank 0 status failed cmd ['python', '-u', 'x.py'] code 1 log log/workerlog.0",
     "process 2 terminated with exit code 1",
     "srun: error: gpu-07: tasks 0-3: Exited with exit code 2",
     "=   EXIT CODE: 9",
     "[INFO]: train job failed! train_ret: 1",
     "container failed with non-zero exit code: 1 (exit code 1)",
     'message: "The replica workerpool0-0 exited with a non-zero status of 128. Termination',
     "[ERROR] ME(130371:281473296949264,MainProcess):2024-12-26-14:22:26.839.923 [mindspore/"
     "parallel/cluster/process_entity/_api.py:268] Worker process 130673 exit with exception.",
     "ERROR 2021-05-24 17:17:14,611 launch_utils.py:545] ABORT!!! Out of all 4 trainers, the "
     "trainer process with rank=[3] was aborted. Please check its log.",
     "trainer-1 exited with code 1",
     "2024-05-01 12:00:00,000 INFO exited: trainer (exit status 2; not expected)",
     "mpirun detected that one or more processes exited with non-zero status, thus causing",
     "Primary job  terminated normally, but 1 process returned",
     "Process `ALIGN (s1)` terminated with an error exit status (255)"),
    ("2024-05-01 12:00:00,000 INFO exited: trainer (terminated by SIGKILL; not expected)",),
    ("panic: runtime error: invalid memory address or nil pointer dereference",),
    ("fatal error: concurrent map writes",),
    ("thread 'main' panicked at src/main.rs:10:5:",
     "thread 'ui-process' (18716) panicked at crates\\brush-render\\src\\render.rs:174:18:",
     "ERROR app: PANIC => panicked at crates/burn-wgpu/src/runtime.rs:329:17:"),
    ('Exception in thread "main" java.lang.OutOfMemoryError: Java heap space',
     'Exception in thread "pool-1-thread-4" Exception in thread "pool-1-thread-1" '
     "java.lang.RuntimeException: execIndexReduce failed; Error code: [77]",
     '[error] Exception in thread "main" java.lang.ExceptionInInitializerError'),
    ("Unhandled exception. Microsoft.ML.OnnxRuntime.OnnxRuntimeException: "
     "[ErrorCode:RuntimeException] provider_bridge_ort.cc:1209 onnxruntime::ProviderLibrary::Get "
     "[ONNXRuntimeError] : 1 : FAIL : LoadLibrary failed with error 126",
     "Unhandled Exception: System.OutOfMemoryException: Exception of type "
     "'System.OutOfMemoryException' was thrown."),
    ('Fatal error: MetalExecutionError: Error Domain=MTLCommandBufferErrorDomain Code=8 '
     '"Insufficient Memory (IOAF code 8)": file /Users/u/waifu2x-metal/Model.swift, line 231',
     "Sources/App/main.swift:12: Fatal error: Index out of range"),
    ("/home/u/.rvm/rubies/ruby-2.7.2/bin/ruby: symbol lookup error: /home/u/torch.rb/lib/torch/"
     "ext.so: undefined symbol: _ZN5torch5utils14cuda_lazy_initEv",),
    ("uncaught exception:",),
    ("Signal 11 caught.", "CommonUnixCrashHandler: Signal=11",
     'Exception was "SIGSEGV: invalid attempt to write memory at address 0x0000000000000003"'),
    ("Caught signal",),
    ("Assertion failed: InSize == (~0ULL) || InSize + Offset <= Size [File:/home/u/UnrealEngine/"
     "Engine/Source/Runtime/VulkanRHI/Private/VulkanMemory.cpp] [Line: 1373] Failed to Map",),
    ("Illegal instruction: 4", "Abort trap: 6", "Bus error: 10",
     "./train.sh: line 3: 4242 Segmentation fault: 11  python train.py"),
    ("ggml/src/ggml.c:20598: GGML_ASSERT(result == nrows * row_size) failed",
     "/home/u/ik_llama.cpp/ggml/src/ggml.c:15229: fatal error"),
    ("11-24 09:35:11.518: A/DEBUG(4913): signal 6 (SIGABRT), code -1 (SI_QUEUE), fault addr "
     "--------",
     "F/libc    (25506): Fatal signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0 in tid "
     "25731 (DefaultDispatch), pid 25506 (submitter.debug)"),
    ("E AndroidRuntime: FATAL EXCEPTION: main",
     "Fatal Exception: java.lang.RuntimeException: Unable to start activity ComponentInfo{a/b}"),
]


class TestPhraseHints:
    def test_every_phrase_has_an_example(self) -> None:
        """A new phrase needs a line here (and a literal in ``_PHRASE_HINTS``)."""
        assert len(native._PHRASE_RES) == len(PHRASE_EXAMPLES)
        for (_kind, pattern), lines in zip(native._PHRASE_RES, PHRASE_EXAMPLES, strict=True):
            for line in lines:
                assert pattern.search(line), (pattern.pattern, line)
                assert native.match_crash(line) is not None, line

    def test_the_hints_skip_no_line_a_phrase_reports(self) -> None:
        """Every line of the corpora and of these examples: the same crash with the literal
        pre-check as with every phrase tried."""
        lines = {line for lines in PHRASE_EXAMPLES for line in lines} | set(corpus_lines())
        assert len(lines) > 3000

        found = [line for line in lines if native.match_crash(line, hints=False) is not None]
        assert len(found) > 60
        for line in lines:
            assert native.match_crash(line, hints=False) == native.match_crash(line), line


class TestDebuggerBacktraces:
    """gdb's ``bt`` of a process that died through ``abort``: the crash, named by the innermost
    frame outside the C and C++ runtimes (what called into the abort)."""

    def test_an_uncaught_cpp_exception_names_the_frame_that_rethrew_it(self) -> None:
        """std::terminate -> abort -> raise are the runtime's; the next frame is the culprit,
        its library from the continuation line."""
        captures = _crash(text_of('''
            (gdb) bt
            #0  0x00007f0f8d981ae0 in raise () from /lib64/libc.so.6
            #1  0x00007f0f8d982f88 in abort () from /lib64/libc.so.6
            #2  0x00007f0f8e5c03d2 in __gnu_cxx::__verbose_terminate_handler() () from /lib64/libstdc++.so.6
            #3  0x00007f0f8e5c7be3 in std::terminate() () from /lib64/libstdc++.so.6
            #4  0x00007f0f8e5c9010 in MyServer::Worker::drain(int) ()
               from /opt/app/lib/libworker.so
            #5  0x00007f0f8e58c935 in start_thread () from /lib64/libpthread.so.0
            '''))

        assert {"kind": "abort", "signal": "SIGABRT",
                "frame": "MyServer::Worker::drain(int) (libworker.so)"} == captures

    def test_glibc_with_debug_symbols_and_source_locations(self) -> None:
        """Newer glibc: ``__pthread_kill_implementation``, ``__GI_raise``, ``__GI_abort`` with
        sources under sysdeps; the user's frame has its arguments and its source file."""
        captures = _crash(text_of('''
            #0  __pthread_kill_implementation (no_tid=0, signo=6, threadid=140) at ./nptl/pthread_kill.c:44
            #1  0x00007ffff7c96e8f in __pthread_kill_internal (signo=6, threadid=<optimized out>) at ./nptl/pthread_kill.c:78
            #2  0x00007ffff7c42476 in __GI_raise (sig=sig@entry=6) at ../sysdeps/posix/raise.c:26
            #3  0x00007ffff7c287f3 in __GI_abort () at ./stdlib/abort.c:79
            #4  0x0000555555555189 in check_batch (n=0) at /src/loader.c:12
            #5  0x00005555555551b0 in main () at /src/loader.c:20
            '''))

        assert "check_batch (loader.c:12)" == captures["frame"]

    def test_a_backtrace_without_an_abort_is_not_a_crash(self) -> None:
        """A stack printed while attached to a live process (py-spy, a hang dump): no abort,
        no raise, nothing ended."""
        found = generic_scan(text_of('''
            (gdb) bt
            #0  0x00007f3a in __futex_abstimed_wait_common64 () from /lib64/libc.so.6
            #1  0x00007f3b in pthread_cond_wait () from /lib64/libc.so.6
            #2  0x00007f3c in c10d::ProcessGroupNCCL::WorkNCCL::wait() () from libtorch_cuda.so
            '''))

        assert [] == loud(found)

    def test_a_signal_handlers_backtrace_symbols_through_abort(self) -> None:
        """Open MPI's handler prints glibc's ``backtrace_symbols`` frames, each behind its
        host and pid: the frames through ``gsignal`` and ``abort`` are the crash, named by the
        first frame outside the C runtime (UCX's fatal-error handler here)."""
        captures = _crash(text_of('''
            [g07r1n14:27251] [ 0] /lib64/libpthread.so.0(+0xf5d0)[0x2aecf85c05d0]
            [g07r1n14:27251] [ 1] /lib64/libc.so.6(gsignal+0x37)[0x2aecf8803207]
            [g07r1n14:27251] [ 2] /lib64/libc.so.6(abort+0x148)[0x2aecf88048f8]
            [g07r1n14:27251] [ 3] /opt/ucx/lib/libucs.so.0(ucs_fatal_error_message+0x55)[0x2aed09993405]
            [g07r1n14:27251] [ 4] /opt/ucx/lib/libucs.so.0(+0x5b094)[0x2aed09998094]
            '''))

        assert {"kind": "abort", "signal": "SIGABRT",
                "frame": "ucs_fatal_error_message (libucs.so.0)"} == captures

    def test_ucx_error_handlers_frames_are_the_crash(self) -> None:
        """UCX prints the frames from its fatal handler (``ucs_handle_error``) and ends the
        process: the crash, named by the first frame past the handler."""
        captures = _crash(text_of('''
            backtrace (tid:  59888)
             0  /opt/nixl.libs/libucs-36b9ef61.so.0.0.0(ucs_handle_error+0x304) [0x7ff41b1ad074]
             1  /opt/nixl.libs/libucx_transport.so(uct_ep_flush+0x27) [0x7ff41b1ad274]
            '''))

        assert "uct_ep_flush (libucx_transport.so)" == captures["frame"]

    def test_backtrace_symbols_without_an_abort_is_not_a_crash(self) -> None:
        """A stack dumped by a watchdog (no abort, no raise): nothing ended."""
        found = generic_scan(text_of('''
            /usr/lib/libmpi.so.12(+0x1d86514) [0x14763ac07514]
            /usr/lib/libmpi.so.12(MPI_Barrier+0x51) [0x14763aa938b1]
            ./app(main+0x21) [0x400a5d]
            '''))

        assert [] == loud(found)

    def test_a_python_raise_statement_is_not_a_gdb_frame(self) -> None:
        """``raise (`` in source text starts nothing: a frame line starts with ``#N``."""
        assert [] == loud(generic_scan("    raise (ValueError if strict else KeyError)(key)\n"))


class TestShellReportsAsPagesAndTerminalsShowThem:
    @pytest.mark.parametrize("line", [
        "**Killed**",
        "`Killed`",
        "**Segmentation fault (core dumped)**",
        "Loading checkpoint shards:  38%|██████▊           | 3/8 [00:02<00:03,  1.28it/s]Killed",
        "100%|██████████| 10/10 [00:01<00:00,  9.12it/s]Segmentation fault (core dumped)",
        "Epoch 3:  12%|█▏        | 120/1000 [01:02<07:38]Bus error",
        "135 | 1534166953117 | /usr/local/bin/train.sh: line 18:    36 Killed                  "
        "python3 convolutional_network.py --trainImagesFile x.gz",
        "job-7 | Segmentation fault (core dumped)",
        "llm_load_tensors: ......................................Segmentation fault (core dumped)",
        # bash's full report of a script's child, after the bar's end
        "Training epoch 132:   8%|###9   | 56/718 [00:04<00:47, 13.82it/s, loss=0.00299]train.sh: "
        "line 52: 24556 Segmentation fault      (core dumped) python train.py --config-name=x",
    ], ids=lambda v: v[:40])
    def test_the_report_through_markup_or_glued_to_a_progress_bar(self, line: str) -> None:
        """A page's bold or code span; a tqdm bar redrawn with ``\\r`` (or a loader's row of
        dots) that never ended its line before the shell reported the death; a log viewer's
        columns before it."""
        assert _crash(line + "\n")["kind"] == "signal"

    @pytest.mark.parametrize("line", [
        "**Killed 3 stale workers**",
        "10/10 [00:01<00:00, 9.12it/s] Killed 3 stale workers",
        "Loading ... Killed 3 stale workers",
        "Loading checkpoint shards: 100%|██████████| 8/8 [00:09<00:00,  1.2s/it]",
        "135 | 1534166953117 | Killed 3 stale workers",
        "Signal: Segmentation fault (11) is what the handler prints; ours printed nothing",
    ], ids=lambda v: v[:40])
    def test_near_misses_stay_quiet(self, line: str) -> None:
        """The word in a sentence, inside markup or after a bar; a bar that finished."""
        assert [] == loud(generic_scan(line + "\n"))


class TestLaunchersReportingAFailureStatus:
    """A launcher's report that a child ended with a failure status is a failure of its own,
    even with no traceback in view: a warning naming the status."""

    @pytest.mark.parametrize(("line", "status"), [
        ("Process 3 exit with status code 250.", "250"),
        ("Container rank 0 status failed cmd ['/opt/conda/bin/python', '-u', 'train.py'] code 1 "
         "log log/workerlog.0", "1"),
        ("[2023-07-20 15:45:13,982] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', "
         "'-u', 'main.py'] exits with return code = 1", "1"),
        ("torch.distributed.elastic.multiprocessing.api:failed (exitcode: 2) local_rank: 0 "
         "(pid: 812) of binary: /usr/bin/python3", "2"),
        ("srun: error: gpu-07: tasks 0-3: Exited with exit code 2", "2"),
        ("=   EXIT CODE: 9", "9"),
        ("trainer-1 exited with code 3", "3"),
        ("2024-05-01 12:00:00,000 INFO exited: trainer (exit status 2; not expected)", "2"),
        ("[2021-04-28T01:55:38Z] e54b4385 || INFO: container failed with non-zero exit code: "
         "container failed with non-zero exit code: 1 (exit code 1)", "1"),
        ("[2022-06-09T09:22:31.405197Z] 8de2ca81 ||   exitcode  : 1 (pid: 36)", "1"),
        ('message: "The replica workerpool1-1 exited with a non-zero status of 1. Termination '
         'reason: Error.', "1"),
        ("  Process `NFCORE_METHYLSEQ:METHYLSEQ:PARABRICKS_FQ2BAMMETH (Ecoli_10K)` terminated "
         "with an error exit status (255)", "255"),
    ], ids=lambda v: v[:40])
    def test_a_failure_status_is_a_warning_naming_it(self, line: str, status: str) -> None:
        d = only(generic_scan(line + "\n"), CRASH)
        assert Severity.WARNING == d.severity
        assert {"kind": "exit", "status": status} == dict(d.captures)

    @pytest.mark.parametrize("line", [
        "train.py: error: unrecognized arguments: --local-rank=2",
        "torchrun: error: the following arguments are required: training_script",
        "finetune.py: error: argument --lr: invalid float value: '1e-4,'",
    ], ids=["unrecognized", "required", "invalid"])
    def test_an_argparse_usage_error_is_the_script_exiting_with_status_2(self, line: str,
                                                                        ) -> None:
        """argparse prints ``prog: error: ...`` under its usage lines and exits with 2."""
        d = only(generic_scan("usage: train.py [-h] [--lr LR]\n" + line + "\n"), CRASH)
        assert Severity.WARNING == d.severity
        assert {"kind": "exit", "status": "2"} == dict(d.captures)

    @pytest.mark.parametrize("line", [
        "gcc: error: unrecognized command-line option '-mavx512'",
        "setup.py: error: see the log for the compiler's output",
    ], ids=["compiler", "free-text"])
    def test_other_programs_error_lines_are_not_usage_errors(self, line: str) -> None:
        assert [] == [d for d in generic_scan(line + "\n") if d.signature == CRASH]

    def test_open_mpi_summary_without_the_status_on_its_line(self) -> None:
        """``mpirun detected that one or more processes exited with non-zero status``."""
        d = only(generic_scan("mpirun detected that one or more processes exited with non-zero "
                              "status, thus causing\n"), CRASH)
        assert Severity.WARNING == d.severity
        assert {"kind": "exit"} == dict(d.captures)

    @pytest.mark.parametrize(("line", "signal"), [
        ("[ERROR] [launch.py:321:sigkill_handler] ['python', 'x.py'] exits with return code = -7",
         "SIGBUS"),
        ("Process 1 exit with status code 137.", "SIGKILL"),
        ("trainer-1 exited with code 137", "SIGKILL"),
        ("2024-05-01 12:00:00,000 INFO exited: trainer (terminated by SIGSEGV; not expected)",
         "SIGSEGV"),
    ], ids=lambda v: v[:40])
    def test_a_signal_status_is_a_crash_naming_the_signal(self, line: str, signal: str) -> None:
        """Negative codes are signals; 128+N is a shell's way of saying signal N."""
        assert signal == _crash(line + "\n")["signal"]

    @pytest.mark.parametrize("line", [
        "Process 3 exit with status code 0.",
        "torch.distributed.elastic.multiprocessing.api:failed (exitcode: 0) local_rank: 0",
        "  exitcode  : 0 (pid: 1234)",
        "Container rank 0 status completed cmd ['python', 'x.py'] code 0 log log/workerlog.0",
        "LAUNCH INFO 2023-08-17 16:45:31,524 Pod completed",
        "=   EXIT CODE: 0",
        "trainer-1 exited with code 0",
        "2024-05-01 12:00:00,000 INFO exited: trainer (exit status 0; expected)",
        "2024-05-01 12:00:00,000 INFO exited: trainer (terminated by SIGTERM; not expected)",
    ], ids=lambda v: v[:40])
    def test_a_clean_end_stays_quiet(self, line: str) -> None:
        assert [] == loud(generic_scan(line + "\n"))

    def test_with_its_traceback_in_view_the_status_is_that_failures_end(self) -> None:
        """One failure, one detection: the traceback, with the report as its evidence."""
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/job/train.py", line 9, in <module>
                main()
            ValueError: boom
            Process 0 exit with status code 1.
            '''))

        d = only(found, "generic_traceback")
        assert "Process 0 exit with status code 1." == dict(d.facts)["ended"]
        assert [] == [x for x in found if x.signature == CRASH]

    def test_an_error_record_after_the_launcher_killed_its_children_is_a_warning(self) -> None:
        """DeepSpeed's ``Killing subprocess N`` fan-out, then its error record (cut before it
        names the status): the launcher's account of a child's end."""
        found = generic_scan(text_of('''
            [2023-07-20 15:45:13,980] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 3966
            [2023-07-20 15:45:13,982] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', 'main.py', '--local_rank=1', '--deepspeed', 'ds.json', '--per_device_eva
            '''))

        d = only(found, "generic_error_record")
        assert Severity.WARNING == d.severity
        assert "Killing subprocess 3966" in dict(d.facts)["ended"]


class TestShellReportsOfAnyLength:
    @pytest.mark.parametrize("line", [
        'bash: 行 1: 12013 段错误               (核心已转储) env "PYCHARM_HOSTED"="1" '
        '"PYTHONPATH"="' + "/home/u/pytorch:" * 30 + '" /home/u/envs/bin/python3.6 -u x.py',
        'bash: line 1: 12013 Segmentation fault (core dumped) env "PYTHONUNBUFFERED"="1" '
        "python3 -u " + "/very/long/path" * 30 + "/train.py",
        "./run.sh: line 9: 4711 Bus error               (core dumped) python train.py",
    ], ids=["zh-padded-long-command", "en-one-space", "en-padded"])
    def test_the_shell_report_names_the_signal_whatever_the_padding_and_command(
            self, line: str) -> None:
        """bash pads the description to a column (zh_CN counts bytes, so wider), then
        ``(core dumped)``, one space and the command line, which an IDE makes long."""
        assert _crash(line + "\n")["signal"] in ("SIGSEGV", "SIGBUS")

    @pytest.mark.parametrize("line", [
        "Segmentation fault (core dumped) when I run it, any idea?",
        "bash: line 1: Killed by the user, restarting",
    ])
    def test_prose_about_a_crash_is_not_a_shell_report(self, line: str) -> None:
        assert [] == loud(generic_scan(line + "\n"))


class TestALauncherSignalledFromOutside:
    """torchelastic's agent received a signal and took its workers down: the job was stopped
    from outside (a closed terminal, a scheduler, an operator), a warning whatever the
    signal, naming it."""

    @pytest.mark.parametrize(("line", "signal"), [
        ("W0828 22:53:47.001000 139822188226368 torch/distributed/elastic/agent/server/api.py:688]"
         " Received Signals.SIGHUP death signal, shutting down workers", "SIGHUP"),
        ("[2024-05-01 12:00:00,000] torch.distributed.elastic.agent.server.api: [WARNING] "
         "Received Signals.SIGTERM death signal, shutting down workers", "SIGTERM"),
        ("W0101 torch/distributed/elastic/agent/server/api.py:688] Received Signals.SIGINT "
         "death signal, shutting down workers", "SIGINT"),
        ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got "
         "signal: 1", "SIGHUP"),
    ], ids=["sighup", "sigterm", "sigint", "signal-exception"])
    def test_the_launcher_s_death_signal_is_a_warning_naming_it(self, line: str,
                                                                 signal: str) -> None:
        d = only(generic_scan(line + "\n"), CRASH)
        assert Severity.WARNING == d.severity
        assert {"kind": "signalled", "signal": signal} == dict(d.captures)

    def test_the_fan_out_after_it_makes_no_second_detection(self) -> None:
        found = generic_scan(text_of('''
            W0828 22:53:47.001000 1398 torch/distributed/elastic/agent/server/api.py:688] Received Signals.SIGHUP death signal, shutting down workers
            W0828 22:53:47.001000 1398 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 246140 closing signal SIGHUP
            W0828 22:53:47.002000 1398 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 246141 closing signal SIGHUP
            '''))

        assert ["signalled"] == [dict(d.captures)["kind"] for d in loud(found)]

    def test_a_child_stopped_by_ctrl_c_stays_quiet(self) -> None:
        """The child's own Ctrl-C is still nothing: only the launcher's death signal is news."""
        assert [] == generic_scan("Child process 4411 exited with signal 2\n")


class TestALauncherReportOfALostTrainer:
    @pytest.mark.parametrize("line", [
        "ERROR 2021-05-24 17:17:14,611 launch_utils.py:545] ABORT!!! Out of all 4 trainers, "
        "the trainer process with rank=[3] was aborted. Please check its log.",
        "the worker process with rank=[0, 2] were aborted",
        "[INFO]: train job failed! train_ret: 1",
        "job failed! proc_ret=2",
    ])
    def test_a_failed_or_aborted_trainer_is_a_failure_status(self, line: str) -> None:
        d = only(generic_scan(line + "\n"), CRASH)
        assert Severity.WARNING == d.severity
        assert "exit" == dict(d.captures)["kind"]

    @pytest.mark.parametrize("line", [
        "[INFO]: train job finished! train_ret: 0",
        "[INFO]: train job failed! train_ret: 0",
        "INFO the request was aborted by the client, retrying",
    ])
    def test_status_zero_and_other_aborts_are_not(self, line: str) -> None:
        assert [] == loud(generic_scan(line + "\n"))


class TestANativeExceptionThrown:
    """c10::Error's what() ends with where it was thrown (``Exception raised from f at
    file:line (most recent call first):``) and the native frames; the message is the line
    before it. Printed outside a Python traceback (a warning record, a watchdog thread) it is
    a warning of its own, whatever the message."""

    def test_a_c10_error_dump_names_where_it_was_raised_and_its_message(self) -> None:
        found = generic_scan(text_of('''
            [rank6]:[W729 10:15:17.529361055 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=76): Connection reset by peer
            Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:675 (most recent call first):
            frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x98 (0x7faded9785e8 in /env/lib/python3.12/site-packages/torch/lib/libc10.so)
            frame #1: <unknown function> + 0x5ba8bfe (0x7fadd1edcbfe in /env/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so)
            '''))

        d = only(found, CRASH)
        assert Severity.WARNING == d.severity
        captures = dict(d.captures)
        assert ("exception", "recvBytes (Utils.hpp:675)") == (captures["kind"],
                                                               captures["frame"])
        assert captures["what"].endswith("Connection reset by peer")

    def test_inside_a_python_traceback_it_is_the_traceback_s_message(self) -> None:
        found = generic_scan(text_of('''
            Traceback (most recent call last):
              File "/job/train.py", line 12, in <module>
                loss.backward()
            RuntimeError: CUDA error: an illegal memory access was encountered
            Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent call first):
            frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f in /x/libc10.so)
            '''))

        assert ["generic_traceback"] == [d.signature for d in loud(found)]

    def test_a_mention_of_the_words_is_not_one(self) -> None:
        assert [] == loud(generic_scan("Exception raised from a worker, see above\n"))


class TestSignalHandlersOfServersAndRuntimes:
    """Triton's and UCX's own handlers print the signal they caught: a fatal one is a crash
    naming it; Triton's ``Signal (15) received.`` is a plain stop, information only."""

    @pytest.mark.parametrize(("line", "signal"), [
        ("Signal (11) received.", "SIGSEGV"),
        ("[inference-service:6939 :0:10213] Caught signal 11 (Segmentation fault: address not "
         "mapped to object at address (nil))", "SIGSEGV"),
        ("[node-3:4242:0:4250] Caught signal 7 (Bus error: nonexistent physical address)",
         "SIGBUS"),
    ], ids=["triton", "ucx-segv", "ucx-bus"])
    def test_a_fatal_signal_caught_by_a_handler_is_a_crash(self, line: str, signal: str) -> None:
        assert signal == _crash(line + "\n")["signal"]

    def test_a_stop_signal_caught_by_triton_is_not_a_crash(self) -> None:
        assert [] == loud(generic_scan("Signal (15) received.\n"))

    @pytest.mark.parametrize("line", [
        "We caught signal 11 (Segmentation fault) in the old build, see #42",
        "Signal (11) received. was the last line before the fix",
    ])
    def test_prose_about_a_caught_signal_is_quiet(self, line: str) -> None:
        assert [] == loud(generic_scan(line + "\n"))

    def test_the_launcher_s_numeric_death_signal_is_named(self) -> None:
        """Newer torchelastic prints the number: ``Received 1 death signal``."""
        d = only(generic_scan(
            "W1221 17:13:59.240000 46660 torch/distributed/elastic/agent/server/api.py:704] "
            "Received 1 death signal, shutting down workers\n"), CRASH)
        assert {"kind": "signalled", "signal": "SIGHUP"} == dict(d.captures)

    def test_mpich_abort_in_a_communicator_is_an_abort(self) -> None:
        d = only(generic_scan(
            "MPICH ERROR [Rank 0] [job id 410301.1] [Thu Feb 13 12:42:18 2025] [nid005414] - "
            "Abort(-1) (rank 0 in comm 0): MPIDI_CRAY_init: GPU_SUPPORT_ENABLED is requested, but "
            "GTL library is not linked\n"), CRASH)
        assert "abort" == dict(d.captures)["kind"]

    def test_msrun_reporting_a_worker_that_exited_with_an_exception(self) -> None:
        d = only(generic_scan(
            "[ERROR] ME(130371:281473296949264,MainProcess):2024-12-26-14:22:26.839.923 "
            "[mindspore/parallel/cluster/process_entity/_api.py:268] Worker process 130673 exit "
            "with exception.\n"), CRASH)
        assert Severity.WARNING == d.severity
        assert "exit" == dict(d.captures)["kind"]

    def test_an_assertion_whose_condition_holds_backticks(self) -> None:
        """``Assertion `... `inf` ...` failed.``: the condition ends at the last backtick."""
        assert "check" == dict(only(generic_scan(
            "/pytorch/aten/src/ATen/native/cuda/TensorCompare.cu:110: _assert_async_cuda_kernel: "
            "block: [0,0,0], thread: [0,0,0] Assertion `probability tensor contains either `inf`, "
            "`nan` or element < 0` failed.\n"), CRASH).captures)["kind"]

    def test_the_shell_s_report_with_trailing_blanks(self) -> None:
        assert "SIGABRT" == _crash("Aborted (core dumped) \n")["signal"]


class TestOtherLanguagesAndEnginesCrashReports:
    """The JVM, .NET, Swift, the dynamic loader, Unreal Engine's crash handler (CARLA, AirSim) and
    macOS shells report a process's end in their own words: each is a crash (ERROR)."""

    @pytest.mark.parametrize(("line", "kind"), [
        ('Exception in thread "pool-1-thread-4" Exception in thread "pool-1-thread-1" '
         "java.lang.RuntimeException: execIndexReduce failed; Error code: [77]", "runtime_panic"),
        ('[error] Exception in thread "main" java.lang.ExceptionInInitializerError',
         "runtime_panic"),
        ("Unhandled exception. System.InvalidOperationException: CUDA is not available",
         "runtime_panic"),
        ("Fatal error: Unexpectedly found nil while unwrapping an Optional value: file "
         "App/Model.swift, line 88", "runtime_panic"),
        ("uncaught exception:", "abort"),
        ("Assertion failed: Result [File:Runtime/CoreUObject/Public/UObject/Stack.h] [Line: 250]",
         "check"),
    ], ids=["jvm-threads", "sbt-main", "dotnet", "swift", "yandex-util", "ue-check"])
    def test_a_runtime_s_own_report_of_the_end(self, line: str, kind: str) -> None:
        assert kind == _crash(line + "\n")["kind"]

    def test_the_dynamic_loader_failing_a_symbol_is_the_process_s_end(self) -> None:
        """ld.so ends the process (status 127) with no signal: a failure status, a warning."""
        d = only(generic_scan("python: symbol lookup error: /usr/lib/libtorch_cuda.so: undefined "
                              "symbol: cudaGraphInstantiateWithFlags\n"), CRASH)
        assert Severity.WARNING == d.severity
        assert "exit" == dict(d.captures)["kind"]

    @pytest.mark.parametrize(("line", "signal"), [
        ("Signal 11 caught.", "SIGSEGV"),
        ("CommonUnixCrashHandler: Signal=11", "SIGSEGV"),
        ('Exception was "SIGSEGV: invalid attempt to write memory at address 0x0000000000000003"',
         "SIGSEGV"),
        ("Illegal instruction: 4", "SIGILL"),
        ("Abort trap: 6", "SIGABRT"),
        ("Bus error: 10", "SIGBUS"),  # macOS numbers SIGBUS 10: named by the word
        ("Killed: 9  python train.py", "SIGKILL"),
    ], ids=["ue", "ue-handler", "ue-minidump", "mac-ill", "mac-abrt", "mac-bus", "mac-kill"])
    def test_engines_and_macos_shells_name_the_signal(self, line: str, signal: str) -> None:
        assert signal == _crash(line + "\n")["signal"]

    def test_unreal_s_banner_before_its_call_stack(self) -> None:
        """UE4 prints ``Caught signal`` alone on a line, then the frames."""
        assert "signal" == _crash(
            "Caught signal\n\nlibUE4Editor-Core.so!FMallocBinned2::Malloc(unsigned long, "
            "unsigned int) [/UnrealEngine/Engine/Source/Runtime/Core/Public/HAL/"
            "MallocBinned2.h:447]\n")["kind"]

    def test_a_stop_signal_caught_by_unreal_is_not_a_crash(self) -> None:
        assert [] == loud(generic_scan("Signal 15 caught.\n"))

    @pytest.mark.parametrize("line", [
        "Killed: 3 processes were stopped by the scheduler",
        "Bus error: 0x1f on device 3 was corrected",
        "We caught signal handling bugs with this patch",
        "the worker died: symbol lookup error is documented in FAQ.md",
        "Unhandled exceptions are logged to the console",
        "Fatal error: see the log: file list, line counts below",
    ])
    def test_near_misses_stay_quiet(self, line: str) -> None:
        assert [] == [d for d in loud(generic_scan(line + "\n"))
                      if d.signature == CRASH and d.severity >= Severity.ERROR]


class TestAndroidCrashReports:
    """A phone or an edge box running a model: debuggerd's tombstone, libc's fatal signal and the
    runtime's fatal exception, as logcat (any of its formats) shows them."""

    @pytest.mark.parametrize(("line", "signal"), [
        ("2021-08-24 18:03:48.360 22507-22507/? A/DEBUG: signal 6 (SIGABRT), code -1 (SI_QUEUE), "
         "fault addr --------", "SIGABRT"),
        ("2024-09-09 11:46:57.037 10383-10383 DEBUG                   pid-10383              "
         "              A  signal 6 (SIGABRT), code -1 (SI_QUEUE), fault addr --------",
         "SIGABRT"),
        ("F/libc    (25506): Fatal signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0 in "
         "tid 25731 (DefaultDispatch), pid 25506 (submitter.debug)", "SIGSEGV"),
    ], ids=["tombstone", "studio-logcat", "libc"])
    def test_a_fatal_signal_names_it(self, line: str, signal: str) -> None:
        assert signal == _crash(line + "\n")["signal"]

    @pytest.mark.parametrize("line", [
        "05-12 10:00:01.123  1234  1234 E AndroidRuntime: FATAL EXCEPTION: main",
        "Fatal Exception: java.lang.RuntimeException: Unable to start activity ComponentInfo{a/b}: "
        "com.google.mediapipe.framework.MediaPipeException: internal",
    ], ids=["androidruntime", "crashlytics"])
    def test_an_apps_fatal_exception(self, line: str) -> None:
        assert "runtime_panic" == _crash(line + "\n")["kind"]

    @pytest.mark.parametrize("line", [
        "I/ample: signal 3 (SIGQUIT) received, dumping stacks",
        "The app handles signal 11 (SIGSEGV) in its own handler, see the docs",
        "W/System: Fatal Exception reporting is disabled",
    ])
    def test_near_misses_stay_quiet(self, line: str) -> None:
        assert [] == [d for d in loud(generic_scan(line + "\n"))
                      if d.signature == CRASH and d.severity >= Severity.ERROR]

    def test_tvm_s_indented_check(self) -> None:
        assert "check" == _crash("  Check failed: (__e == VK_SUCCESS) is false: Vulkan Error, "
                                 "code=-2: VK_ERROR_OUT_OF_DEVICE_MEMORY\n")["kind"]


class TestGgmlAborts:
    """llama.cpp's ggml aborts through ``ggml_abort``: the file, the line and the failed assert."""

    @pytest.mark.parametrize("line", [
        "ggml/src/ggml.c:20598: GGML_ASSERT(result == nrows * row_size) failed",
        "/home/u/pkgs/ik_llama.cpp/ggml/src/ggml.c:15229: fatal error",
    ], ids=["assert", "fatal"])
    def test_a_ggml_abort_is_a_failed_check(self, line: str) -> None:
        assert "check" == _crash(line + "\n")["kind"]

    @pytest.mark.parametrize("line", [
        "src/main.c:12:10: fatal error: cuda.h: No such file or directory",
        "we hit GGML_ASSERT failed once in ggml.c, see the fix",
    ], ids=["compiler", "prose"])
    def test_a_compiler_s_fatal_error_and_prose_are_not(self, line: str) -> None:
        assert [] == [d for d in loud(generic_scan(line + "\n"))
                      if d.signature == CRASH and d.severity >= Severity.ERROR]
