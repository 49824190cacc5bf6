"""Native crashes: a process that died of a fatal signal or an abort, however it was reported.

The forms come from the code that prints them:

- the shells (bash ``jobs.c`` / zsh): ``Segmentation fault (core dumped)``, ``Killed``,
  ``script.sh: line 14: 88213 Killed   python train.py``, ``zsh: segmentation fault  python``,
  and the same in a Chinese locale (glibc's and bash's zh_CN catalogues: ``段错误 (核心已转储)``,
  ``已杀死``, ``已放弃``, ``总线错误``, ``行 14:``);
- the C runtime and glibc: ``terminate called after throwing an instance of 'c10::Error'``,
  ``double free or corruption``, ``*** stack smashing detected ***``;
- glog / absl failure handlers: ``*** SIGSEGV received at time=...``, ``*** Aborted at ...
  (unix time)``, ``*** Check failure stack trace: ***``, ``Check failed: ...``;
- CPython's faulthandler: ``Fatal Python error: Segmentation fault`` (its frames are read by the
  traceback reader, see ``tracebacks.py``);
- Go and Rust runtimes: ``panic: ...``, ``fatal error: ...``, ``thread 'main' panicked at``;
- launchers reporting a child that died of a signal: ``exited with signal 9``, ``died with
  <Signals.SIGKILL: 9>``, torchrun's ``exitcode  : -9`` and ``Signal 6 (SIGABRT) received by
  PID``, ``exit code 137``, mpirun's ``exited on signal 11``, ``MPI_ABORT was invoked``;
  or with a failure status (kind ``exit``): torchrun's ``failed (exitcode: 1)``, DeepSpeed's
  ``exits with return code = 1``, Horovod's ``Process 3 exit with status code 250.``, Paddle's
  ``Container rank 0 status failed cmd [...] code 1``, srun's ``Exited with exit code 2``,
  Paddle launch's ``train job failed! train_ret: 1`` and ``... rank=[3] was aborted``;
- a launcher signalled from outside that took its workers down (kind ``signalled``, a warning
  whatever the signal): torchelastic's ``Received Signals.SIGHUP death signal``;
- a native exception thrown (kind ``exception``): c10::Error's ``Exception raised from f at
  file:line (most recent call first):``, read by the detector with the message line before it;
- debuggers: gdb's ``Thread 1 "python" received signal SIGABRT``, lldb's ``stop reason =
  signal SIGSEGV``, and a gdb backtrace through ``abort ()`` / ``raise ()`` /
  ``std::terminate()``, or a signal handler's ``backtrace_symbols`` frames through
  ``(gsignal+0x37)`` / ``(abort+0x148)`` (``BacktraceReport``: named by its innermost frame
  outside the C and C++ runtimes);
- MPI's reports: Hydra's ``rank 1 died from signal 7``, MPICH's ``Assertion failed in file
  ... at line N: cond``;
- the runtimes of other languages and engines: the JVM's ``Exception in thread "main"
  java.lang.X`` (threads interleaved, a build tool's ``[error]`` before it), .NET's ``Unhandled
  exception. System.X: ...``, Swift's ``Fatal error: msg: file F, line N``, the dynamic loader's
  ``python: symbol lookup error: x.so: undefined symbol: ...`` (the process ends with it),
  Unreal Engine's crash handler (``Signal 11 caught.``, ``CommonUnixCrashHandler: Signal=11``,
  ``Caught signal``, ``Exception was "SIGSEGV: ..."``, ``Assertion failed: expr [File:F]
  [Line: N]``: CARLA, AirSim), and a C++ runtime's ``uncaught exception:`` banner (Yandex's
  util, as CatBoost prints it); macOS shells' ``Illegal instruction: 4``, ``Abort trap: 6``,
  ``Segmentation fault: 11`` (named by the word: macOS numbers some signals otherwise);
- ggml's abort (llama.cpp): ``ggml/src/ggml.c:20598: GGML_ASSERT(cond) failed``, ``ggml.c:N:
  fatal error``;
- Android: debuggerd's tombstone and libc's ``Fatal signal 11 (SIGSEGV), code 1 (SEGV_MAPERR)``
  behind logcat's columns, an app's ``FATAL EXCEPTION: main`` and Crashlytics' ``Fatal
  Exception: java.lang.RuntimeException``.

The shell's report is read through markup a page puts around it (``**Killed**``) and glued to
the end of a progress bar that ended without a newline (``3/8 [00:02<00:03,  1.28it/s]Killed``).

A signal someone sends to stop a process (SIGTERM, SIGINT, SIGHUP, SIGUSR*) is not a crash: it is
reported at info level, and a child that exits on SIGINT (Ctrl-C) not at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sigwatch.detectors.generic._text import SIGNALS, clip, signal_name
from sigwatch.detectors.generic.tracebacks import LineIn, Report, unmarked

__all__ = ["BacktraceReport", "Crash", "backtrace_start", "match_crash", "raised_from"]

# Signals that mean the process crashed or was killed hard; the rest are a stop request.
CRASH_SIGNALS = frozenset({4, 5, 6, 7, 8, 9, 11, 24, 25, 31})
_QUIET_SIGNALS = frozenset({2})  # Ctrl-C by hand
_NAME_TO_NUMBER = {name: number for number, name in SIGNALS.items()}
_KERNEL_TRAPS = {"segfault": 11, "general protection fault": 11, "stack segment": 11,
                 "divide error": 8, "invalid opcode": 4, "int3": 5}
_SHELL_WORDS = {
    "segmentation fault": 11, "bus error": 7, "floating point exception": 8,
    "illegal instruction": 4, "illegal hardware instruction": 4, "aborted": 6, "abort": 6,
    "iot instruction": 6,  # zsh's name for SIGABRT (SIGIOT) on some systems
    "killed": 9, "trace/breakpoint trap": 5, "terminated": 15, "hangup": 1, "quit": 3,
    "abort trap": 6, "trace/bpt trap": 5,  # macOS shells
    "cpu time limit exceeded": 24, "file size limit exceeded": 25, "bad system call": 31,
    # zh_CN, as glibc's strsignal (sysdeps/generic/siglist.h) and bash (siglist.c) translate
    # them: what a shell prints on a node whose locale is Chinese
    "段错误": 11, "总线错误": 7, "浮点数例外": 8, "浮点数异常": 8, "非法指令": 4, "非法的指令": 4,
    "已放弃": 6, "已杀死": 9, "追踪与中断点陷阱": 5, "已终止": 15,
}


@dataclass(frozen=True, slots=True)
class Crash:
    """What a crash line says: the kind of report, the signal if one is named, and a summary."""

    kind: str  # signal | abort | check | runtime_panic | exit (a failure status, no signal)
    #          | signalled (a launcher stopped from outside, taking its workers down)
    #          | exception (a native exception thrown: c10::Error's "Exception raised from")
    signal: int | None
    summary: str
    kernel: bool = False  # a kernel message: only news where the kernel says it
    status: int | None = None  # the exit status a launcher reported (kind ``exit``)

    @property
    def fatal(self) -> bool:
        """A crash (error), not a stop request (info)."""
        return self.signal is None or self.signal in CRASH_SIGNALS

    @property
    def quiet(self) -> bool:
        """Ctrl-C on a child; a launcher that was signalled is news whatever the signal."""
        return self.kind != "signalled" and self.signal in _QUIET_SIGNALS


_SHELL_WORD = (r"(?P<word>Segmentation fault|Bus error|Floating point exception|Illegal instruction"
               r"|Aborted|Killed|Trace/breakpoint trap|Terminated|Hangup|Quit"
               r"|CPU time limit exceeded|File size limit exceeded|Bad system call"
               r"|段错误|总线错误|浮点数例外|浮点数异常|非法指令|非法的指令|已放弃|已杀死"
               r"|追踪与中断点陷阱|已终止)")
_ZSH_WORD = (r"(?P<zword>segmentation fault|bus error|floating point exception"
             r"|illegal hardware instruction|abort|IOT instruction|killed|trace trap|terminated"
             r"|hangup)")
# bash's "line N:" (zh_CN: "行 N:", newer catalogues "第 N 行" and a full-width colon, U+FF1A)
_LINE_NO = r"(?:line \d{1,7}|行 \d{1,7}|第 ?\d{1,7} ?行)[:\uff1a]"
_SHELL_RE = re.compile(
    # bash: the report alone, with a job number, or "script: line N: PID <word>  command"
    # (``at``: bash pads the description to a column, wider in a zh_CN locale where it counts
    # bytes, then "(core dumped)", one space and the command line, however long)
    # (a log viewer's or a collector's columns before it: "135 | 1534166953117 | ...")
    r"^(?:[\w.:/-]{1,40} \| ){0,3}(?:\[\d{1,4}\][+-]? +)?"
    r"(?:(?P<at>\S{1,200}: " + _LINE_NO + r" *\d{1,10} +)"
    r"|(?:\S{1,200}: " + _LINE_NO + r" *)?(?:\d{1,10} +)?)"
    + _SHELL_WORD + r"(?P<core> {0,40}[(\uff08](?:core dumped|核心已转储)[)\uff09])?"
    r"(?:(?(at)[ \t]+|(?: {2,}|\t))\S.{0,4000})?[ \t]*$"
    # zsh: "zsh: segmentation fault (core dumped)  python x.py", "[1]  1234 killed  python"
    r"|^(?:zsh: |\[\d{1,4}\] +\d{1,10} )" + _ZSH_WORD + r"(?: \(core dumped\))? +\S")
# The shell's report glued to the end of a progress bar (tqdm's ``n/N [elapsed<left, rate]``)
# that was redrawn with ``\r`` and never ended its line before the process died.
# (Or to a loader's row of progress dots: llama.cpp's "....Segmentation fault (core dumped)".)
_BAR_END = r"\d/\d{1,12} \[[\d:<?]{4,24}(?:, [^\]]{0,60})?\]"  # tqdm's "n/N [elapsed<left, rate]"
_GLUED_RE = re.compile(
    r"(?:" + _BAR_END + r"|\.{3})" + _SHELL_WORD
    + r"(?P<core> ?\((?:core dumped|核心已转储)\))?\s*$")
# The end of such a bar followed by more than the word: bash's full report of a script's
# child ("...13.82it/s, loss=0.003]train.sh: line 52: 24556 Segmentation fault  (core dumped)
# python train.py"), read by the shell's own pattern from where the bar ends.
_BAR_END_RE = re.compile(_BAR_END + r"(?=\S)")
_PHRASE_RES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rx)) for kind, rx in (
        # a launcher that was itself signalled from outside and took its workers down with it
        # (torchelastic's agent: "Received Signals.SIGHUP death signal, shutting down workers",
        # its SignalException "Process 4242 got signal: 1"): kind ``signalled``, whatever the
        # signal
        # (newer torch: "Received 1 death signal, shutting down workers")
        ("signalled", (r"\bReceived (?:Signals\.)?(?P<sig>SIG[A-Z]{2,6}) death signal"
                       r"|\b(?:Received (?=\d{1,2} death signal)"
                       r"|SignalException: Process \d{1,10} got signal: )(?P<num>\d{1,2})\b")),
        ("abort", (r"terminate called (?:after throwing an instance of '(?P<what>[^']{1,200})'"
                   r"|recursively|without an active exception)")),
        # LLVM's C++ runtime (clang builds, macOS): the same std::terminate, one line
        ("abort", (r"\blibc\+\+abi(?:\.dylib)?: terminating(?: (?:due to|with) uncaught "
                   r"exception of type (?P<what>\S[^\n]{0,200}))?")),
        ("abort", (r"^(?:\*\*\* )?(?P<what>double free or corruption"
                   r"|free\(\): invalid (?:pointer|size)|munmap_chunk\(\): invalid pointer"
                   r"|malloc\(\): (?:corrupted|memory corruption)[^*]{0,60}"
                   r"|corrupted size vs\. prev_size|stack smashing detected"
                   r"|pure virtual method called)")),
        ("signal", (r"\*\*\* (?P<sig>SIG[A-Z]{2,6}) (?:\(@[^)]{1,40}\) )?"
                    r"received (?:at time|by PID)")),
        ("signal", r"\*\*\* Aborted at \d{1,12} \(unix time\)"),
        ("check", r"\*\*\* Check failure stack trace: \*\*\*"),
        # (TVM indents it under its banner: "  Check failed: (__e == VK_SUCCESS) is false: ...")
        ("check", r"(?:^\s{0,8}|[\]:] )(?:CHECK|Check) failed: (?P<what>\S.{0,200})"),
        # PyTorch's TORCH_INTERNAL_ASSERT ('... INTERNAL ASSERT FAILED at "../aten/src/ATen/cuda/
        # CUDAContext.cpp":50, please report a bug to PyTorch.')
        ("check", r"(?P<what>\S.{0,200}?) INTERNAL ASSERT FAILED at \"[^\"]{1,300}\":\d{1,6}"),
        # glibc's __assert_fail (and CUDA's device-side assert, which prints the same way)
        ("check", r"Assertion [`'](?P<what>.{1,200})[`'] failed\.?\s*$"),
        # PSM/PSM3's psmi_assert ("host:rank1: Assertion failure at psm3/ptl_am/ptl.c:196: x")
        ("check", r"(?:^|: )Assertion failure at (?P<what>[\w./-]{1,160}:\d{1,6}: \S.{0,200})"),
        # MPICH's MPIR_Assert ("Assertion failed in file src/mpid/ch4/src/init_comm.c at line
        # 72: in_use == 0") and the Microsoft C runtime's ("Assertion failed: p != 0, file x.c,
        # line 12")
        ("check", (r"\bAssertion failed in file (?P<what>\S{1,300} at line \d{1,7}: \S.{0,200})"
                   r"|^Assertion failed: (?P<what2>\S.{0,200}), file \S{1,300}, line \d{1,7}\b")),
        # gdb (``Program received signal``, ``Thread 1 "python" received signal``) and lldb
        ("signal", (r"(?:Program|Thread \d{1,6}(?: \"[^\"]{0,60}\")?) received signal "
                    r"(?P<sig>SIG[A-Z]{2,6})|stop reason = signal (?P<sig2>SIG[A-Z]{2,6})")),
        ("signal", r"\bSignal (?P<num>\d{1,2}) \((?P<sig>SIG[A-Z]{2,6})\) received by PID"),
        # c10's FatalSignalHandler (PyTorch, TORCH_SHOW_CPP_STACKTRACES): "SIGABRT(6), PID:
        # 4119976, Thread 4119976:" before each thread's native frames
        ("signal", (r"\b(?P<sig>SIG[A-Z]{2,6})\((?P<num>\d{1,2})\), PID: \d{1,10}, "
                    r"Thread \d{1,10}:")),
        # (MPICH's Hydra: "rank 1 died from signal 7", "... died from signal 11 and dumped core")
        ("signal", (r"(?:exited|died|terminated|killed|was killed|exits?) (?:with|by|on|from) "
                    r"(?:the )?signal[: ]+(?:(?P<sig>SIG[A-Z]{2,6})|-?(?P<num>\d{1,2})\b"
                    r"|(?P<sword>Killed|Segmentation fault|Aborted|Bus error|Terminated"
                    r"|Floating point exception|Illegal instruction))")),
        ("signal", r"died with <Signals\.(?P<sig>SIG[A-Z]{2,6}): \d{1,2}>"),
        # Open MPI's signal handler: "[host:pid] *** Process received signal ***" then
        # "[host:pid] Signal: Segmentation fault (11)"
        ("signal", r"(?:^|\] )Signal: [A-Z][a-z]{2,20}(?: [a-z]{2,20}){0,3} \((?P<num>\d{1,2})\)$"),
        ("signal", r"received signal (?P<sig>SIG[A-Z]{2,6})(?:, terminating| \(\d+\))"),
        # servers' and runtimes' own fatal-signal handlers: Triton's "Signal (11) received."
        # (then its backtrace; "Signal (15) received." on a plain stop, not fatal) and UCX's
        # "[host:pid:tid] Caught signal 11 (Segmentation fault: address not mapped ...)"
        ("signal", r"^Signal \((?P<num>\d{1,2})\) received\.?\s*$"),
        ("signal", r"\bCaught signal (?P<num>\d{1,2}) \((?:[A-Z][a-z]{2,20}(?: [a-z]{2,20}){0,3})"),
        ("signal", (r"\b(?:exit ?code|exitcode|return ?code|returncode|exit status|exit_code)"
                    r"\s*[:=]?\s*-(?P<num>\d{1,2})\b")),
        ("signal", (r"\b(?:exit(?:ed)? (?:with )?(?:error )?(?:code|status)|exitcode|return code"
                    r"|returncode)"
                    r"\s*[:=]?\s*(?P<code>1[3-5]\d)\b")),
        ("signal", r"\[signal (?P<sig>SIG[A-Z]{2,6}): "),
        # a signal's name alone on its line (AMReX's handler prints it after its abort message)
        ("signal", r"^(?P<sig>SIG(?:SEGV|ABRT|BUS|FPE|ILL|KILL|TRAP|SYS))\s*$"),
        # Go's runtime on a fatal signal (a cgo library crashed: Ollama's runner, device
        # plugins): "SIGSEGV: segmentation violation", "SIGABRT: abort", then "PC=... m=N"
        ("signal", (r"^(?:[\d/:.,T+-]{4,32} ){0,2}"
                    r"(?P<sig>SIG(?:SEGV|ABRT|BUS|FPE|ILL|TRAP|SYS)): (?:segmentation "
                    r"violation|abort|bus error|floating-point exception|illegal instruction"
                    r"|trace/breakpoint trap|bad system call)\s*$")),
        # a fatal-signal handler's banner ("!!!!!!! Segfault encountered !!!!!!!", then the
        # native frames as ``File "<unknown>", line 0, in ...``)
        ("signal", r"!{3,} ?(?P<segv>Segfault) encountered ?!{3,}"),
        ("abort", r"MPI_ABORT was invoked on rank \d{1,7}"),
        # the MPI error handlers: Open MPI's "*** An error occurred in MPI_Init ...
        # MPI_ERRORS_ARE_FATAL", MPICH's "Abort(1234) on node 7 (rank 7 in comm 0): Fatal error"
        ("abort", (r"\*\*\* An error occurred in MPI_\w{1,40}|MPI_ERRORS_ARE_FATAL"
                   r"|\bAbort\(-?\d{1,12}\) (?:on node \d{1,7}|\(rank \d{1,7} in comm)")),
        # the kernel's OOM killer (mm/oom_kill.c), cgroup or global
        ("signal", r"\bKilled process \d{1,10} \((?P<what>[^)]{1,40})\)"),
        # the kernel's report of a user process it signalled (arch/x86/mm/fault.c,
        # arch/x86/kernel/traps.c): "python[1234]: segfault at 0 ip ...", "traps: python[1234]
        # general protection fault ip:...", "... trap divide error ip:...", "trap invalid opcode"
        ("signal", r"\[\d{1,10}\]: (?P<kseg>segfault) at [0-9a-f]{1,16} ip "),
        ("signal", (r"\[\d{1,10}\]:? (?:trap )?(?P<ktrap>general protection fault|divide error"
                    r"|invalid opcode|stack segment|int3)(?:: \d+)? ip:?")),
        # systemd: a unit's process killed by a signal, or exited with a failure status
        ("signal", (r"(?:Main|Control) process exited, code=(?:killed|dumped), "
                    r"status=(?P<num>\d{1,2})/")),
        ("exit", r"(?:Main|Control) process exited, code=exited, status=(?P<status>[1-9]\d{0,2})/"),
        # Kubernetes: a container the kernel killed for memory, or restarting in a loop
        ("signal", r"\b(?P<oom>OOMKilled)\b"),
        ("exit", r"\bCrashLoopBackOff\b|Back-off restarting failed container"),
        # a launcher's report of a child that ended with a failure status (its own words)
        ("exit", (r"failed \(exitcode: ?(?P<st1>[1-9]\d{0,2})\)"
                  r"|(?:^|\|\|)\s*exitcode\s*: (?P<st2>[1-9]\d{0,2}) \(pid"
                  # an orchestrator's report of a container (Determined, Kubeflow)
                  r"|\bfailed with (?:a )?non-zero exit (?:code|status):? (?P<st12>[1-9]\d{0,2})\b"
                  # Vertex AI's and AI Platform's report of a replica ("The replica
                  # workerpool0-0 exited with a non-zero status of 128.")
                  r"|\bexited with a non-zero (?:exit )?(?:status|code) of (?P<st13>[1-9]\d{0,2})\b"
                  # a workflow engine's report of a task (Nextflow: "Process `ALIGN (s1)`
                  # terminated with an error exit status (255)")
                  r"|\bProcess `[^`]{1,300}` terminated with an error exit status "
                  r"\((?P<st14>[1-9]\d{0,2})\)"
                  r"|exits with return code = (?P<st3>[1-9]\d{0,2})\b"
                  r"|Process \d{1,7} exit with status code (?P<st4>[1-9]\d{0,2})\b"
                  r"|Container rank \d{1,7} status failed cmd \[.{0,4000}?\] code "
                  r"(?P<st5>[1-9]\d{0,2})\b"
                  r"|process \d{1,7} terminated with exit code (?P<st6>[1-9]\d{0,2})\b"
                  r"|tasks? [\d,-]{1,200}: Exited with exit code (?P<st7>[1-9]\d{0,2})\b"
                  r"|=   EXIT CODE: (?P<st8>[1-9]\d{0,2})\b"
                  # Paddle's launch: "train job failed! train_ret: 1", and its report of the
                  # trainer it lost ("the trainer process with rank=[3] was aborted")
                  r"|\bfailed!? {1,3}\w{0,30}_ret(?:code)?\s*[:=]\s*(?P<st11>[1-9]\d{0,2})\b"
                  # MindSpore's msrun: "Worker process 130673 exit with exception."
                  r"|\bWorker process \d{1,10} exit with exception\b"
                  r"|\b(?:process|trainer|worker|task)e?s? (?:with )?rank ?=? ?\[?[\d, ]{1,200}\]?"
                  r" (?:was|were|has been|have been) aborted\b"
                  # docker compose's and supervisord's reports of a service's end
                  r"|^[\w.-]{1,80} +(?:\| +)?exited with code (?P<st9>[1-9]\d{0,2})\s*$"
                  r"|exited: \S{1,80} \(exit status (?P<st10>[1-9]\d{0,2}); not expected\)"
                  # Open MPI's summaries (the status is on a later line)
                  r"|detected that one or more processes exited with non-zero status"
                  r"|terminated normally, but \d{1,7} process(?:es)? returned")),
        ("signal", r"exited: \S{1,80} \(terminated by (?P<sig>SIG[A-Z]{2,6}); not expected\)"),
        ("runtime_panic", r"^panic: (?P<what>\S.{0,200})$"),
        ("runtime_panic", r"^fatal error: (?P<what>\S.{0,200})$"),
        # Rust: "thread 'main' panicked at"; or the location right after the words, which
        # also reads Rust 1.88's "thread 'ui' (18716) panicked at src/render.rs:174:18:" and
        # a logger's record of a panic ("PANIC => panicked at crates/burn/src/lib.rs:329:17:")
        ("runtime_panic", (r"thread '[^']{0,80}' panicked at"
                           r"|\bpanicked at [^\s'\"]{1,300}\.rs:\d{1,7}:\d{1,7}")),
        # the JVM's report of an uncaught exception (several threads' heads may come first,
        # interleaved; sbt and Gradle put their level before it)
        ("runtime_panic", (r"^(?:\[(?:error|ERROR)\] {1,3})?"
                           r"(?:Exception in thread \"[^\"]{1,80}\" ){1,8}"
                           r"(?P<what>[\w.$]{1,120}(?:Error|Exception)\b.{0,200})")),
        # .NET's ("Unhandled exception. System.InvalidOperationException: ...", .NET
        # Framework's "Unhandled Exception: System.X: ...")
        ("runtime_panic", (r"^Unhandled [eE]xception[.:] (?P<what>[\w.`+]{1,160}"
                           r"(?:Exception|Error)\b.{0,200})")),
        # Swift's runtime ("Fatal error: Index out of range: file x.swift, line 12"; newer:
        # "x.swift:12: Fatal error: msg")
        ("runtime_panic", (r"\bFatal error: (?P<what>.{1,300}?): file \S{1,300}, line \d{1,7}\b"
                           r"|\.swift:\d{1,7}: Fatal error: (?P<what2>\S.{0,200})")),
        # the dynamic loader failing a lazy symbol: the process ends there
        ("exit", r": symbol lookup error: \S{1,400}: undefined symbol: (?P<what>\S{1,300})"),
        # a C++ runtime's banner for an exception nothing caught (Yandex's util: CatBoost's
        # "uncaught exception:" then "what() -> ..." and "type -> ...")
        ("abort", r"^uncaught exception:\s*$"),
        # Unreal Engine's crash handler (CARLA, AirSim): "Signal 11 caught.", then
        # "CommonUnixCrashHandler: Signal=11"; UE4's "Caught signal" before the call stack; the
        # minidump report's 'Exception was "SIGSEGV: invalid attempt to write memory ..."'; a
        # failed check "Assertion failed: expr [File:path] [Line: 1373]"
        ("signal", (r"^Signal (?P<num>\d{1,2}) caught\.\s*$"
                    r"|\bCommonUnixCrashHandler: Signal=(?P<num2>\d{1,2})\b"
                    r"|^Exception was \"(?P<sig>SIG[A-Z]{2,6}): ")),
        ("signal", r"^Caught signal\s*$"),
        ("check", (r"\bAssertion failed: (?P<what>\S.{0,200}?) \[File:[^\]]{1,400}\] ?"
                   r"\[Line: \d{1,7}\]")),
        # macOS shells: the signal's word and its (macOS) number ("Illegal instruction: 4",
        # "Abort trap: 6", "Bus error: 10", "Segmentation fault: 11", "Killed: 9")
        ("signal", (r"^(?:\S{1,200}: line \d{1,7}: {0,4}\d{1,10} {1,40})?(?P<sword>Segmentation "
                    r"fault|Bus error|Illegal instruction|Abort trap|Killed|Floating point "
                    r"exception|Trace/BPT trap): \d{1,2}(?: {2,}\S.{0,4000}|\**\s*)$")),
        # ggml's abort (llama.cpp, whisper.cpp): "ggml/src/ggml.c:20598: GGML_ASSERT(result ==
        # nrows * row_size) failed", "ggml.c:15229: fatal error", then abort()
        ("check", (r"^\S{1,300}\.(?:c|cc|cpp|cu|h):\d{1,6}: (?:GGML_ASSERT\((?P<what>.{1,200})\) "
                   r"failed|fatal error)\s*$")),
        # Android: debuggerd's tombstone and libc's report of a fatal signal ("signal 6 (SIGABRT),
        # code -1 (SI_QUEUE), fault addr --------", "Fatal signal 11 (SIGSEGV), code 1
        # (SEGV_MAPERR), fault addr 0x0 in tid 25731"), behind logcat's columns
        ("signal", (r"\b(?:Fatal )?signal (?P<num>\d{1,2}) \((?P<sig>SIG[A-Z]{2,6})\), "
                    r"code -?\d{1,3}\b")),
        # an app's crash as Android's runtime ("FATAL EXCEPTION: main") and Crashlytics
        # ("Fatal Exception: java.lang.RuntimeException: ...") report it
        ("runtime_panic", (r"\bFATAL EXCEPTION: \S"
                           r"|^Fatal Exception: (?P<what>[\w.$]{1,120}(?:Error|Exception)\b"
                           r".{0,200})")),
    ))


# Literals one of which every phrase above contains (case as written): a line with none of them
# skips the phrases (most error lines; the shell report is anchored and cheap). The test
# ``test_generic_native`` checks the phrases against every line of the corpora with and
# without this.
_PHRASE_HINTS = re.compile("|".join(re.escape(hint) for hint in (
    "terminate called", "libc++abi", "double free", "free(): invalid", "munmap_chunk", "malloc(): ",
    "corrupted size", "stack smashing", "pure virtual", "***", "heck failed: ", "CHECK failed: ",
    "Assertion ", "signal", "Signal", "exit", "return", "MPI_", "Abort(", "Killed process",
    "segfault at", "general protection fault", "divide error", "invalid opcode",
    "stack segment", "int3", "process exited", "OOMKilled", "CrashLoopBackOff",
    "Back-off restarting", "panic", "fatal error: ", "Exception in thread",
    "status failed cmd", "EXIT CODE", "terminated normally", "_ret", "aborted",
    "Segfault encountered", ", PID: ", "INTERNAL ASSERT FAILED", "SIGSEGV", "SIGABRT", "SIGBUS",
    "SIGFPE", "SIGILL", "SIGKILL", "SIGTRAP", "SIGSYS", "Unhandled", "Fatal error: ",
    "symbol lookup error", "uncaught exception", "caught", "Caught signal",
    "CommonUnixCrashHandler", "Exception was", "fault: ", "error: ", "instruction: ",
    "trap: ", "Killed: ", "exception: ", "FATAL EXCEPTION: ", "Fatal Exception: ", "GGML_ASSERT",
    ": fatal error")))


# A C++ exception's own report of where it was thrown: c10::Error's what() (PyTorch, and the
# libraries built on c10) ends its message with "Exception raised from recvBytes at
# .../c10d/Utils.hpp:675 (most recent call first):" and the native frames ("frame #0:
# c10::Error::Error(...)"); the message is the line before.
_RAISED_RE = re.compile(
    r"\bException raised from (?P<func>\S{1,200}) at (?P<where>\S{1,400}) "
    r"\(most recent call first\)")


def raised_from(text: str) -> str | None:
    """``func (file:line)`` for a line saying where a native exception was thrown, or None."""
    m = _RAISED_RE.search(text)
    if m is None:
        return None
    return clip(f"{m.group('func')} ({m.group('where').rsplit('/', 1)[-1]})", 200)


def _number(name: str | None, num: str | None) -> int | None:
    if num is not None:
        return int(num)
    if name is not None:
        return _NAME_TO_NUMBER.get(name)
    return None


# argparse's ``parser.error``: ``train.py: error: unrecognized arguments: --local-rank=2``
# under its usage lines, then ``sys.exit(2)``. Only a Python script's name or a Python
# launcher's: a compiler's or a linker's ``: error:`` lines are not one process's end.
_ARGPARSE_RE = re.compile(
    r"^(?:[\w.-]{1,80}\.py|torchrun|deepspeed|accelerate(?: [\w-]{1,40})?|composer|lightning"
    r"|python3? -m [\w.]{1,80}): error: (?:unrecognized arguments|the following arguments are"
    r" required|argument |invalid choice|unexpected argument|one of the arguments)")


def match_crash(text: str, *, hints: bool = True) -> Crash | None:
    """The crash ``text`` reports, or None (``hints=False``: try every phrase, for tests)."""
    m = _SHELL_RE.search(text) or _SHELL_RE.search(unmarked(text)) or _GLUED_RE.search(text)
    if m is None and "/" in text and (bar := _BAR_END_RE.search(text)) is not None:
        m = _SHELL_RE.match(text[bar.end():])
    if m is not None:
        word = (m.group("word") or m.group("zword") or "").lower()
        number = _SHELL_WORDS.get(word, 5 if word == "trace trap" else None)
        return Crash("signal", number, clip(text, 200))
    if ": error: " in text and (usage := _ARGPARSE_RE.match(text.strip())) is not None:
        return Crash("exit", None, clip(f"{usage.group()} (a usage error: argparse exits with "
                                        "status 2)", 200), status=2)
    if hints and _PHRASE_HINTS.search(text) is None:
        return None
    for kind, pattern in _PHRASE_RES:
        found = pattern.search(text)
        if found is None:
            continue
        groups = found.groupdict()
        number = _number(groups.get("sig") or groups.get("sig2"),
                         groups.get("num") or groups.get("num2"))
        if kind == "exit":
            status = next((int(v) for k, v in groups.items() if k.startswith("st") and v), None)
            if status is not None and status - 128 in SIGNALS:
                number = status - 128  # 137: a shell's way of saying SIGKILL
                return Crash("signal", number, clip(f"{signal_name(number)}: {text}", 200))
            return Crash("exit", None, clip(text, 200), status=status)
        if groups.get("sword"):
            number = _SHELL_WORDS.get(str(groups["sword"]).lower())
        if groups.get("segv"):
            number = 11
        if groups.get("code"):
            number = int(groups["code"]) - 128
            if number not in SIGNALS:
                continue
        if kind == "signal" and number is None and ("Aborted at" in found.group()
                                                     or groups.get("what") or groups.get("oom")):
            number = 6 if "Aborted at" in found.group() else 9
        if groups.get("kseg") or groups.get("ktrap"):
            number = _KERNEL_TRAPS.get(str(groups.get("ktrap") or "segfault"), 11)
        summary = text
        if (number is not None and kind in ("signal", "signalled")
                and signal_name(number) not in text):
            summary = f"{signal_name(number)}: {text}"
        kernel = "Killed process" in found.group() or bool(groups.get("kseg")
                                                            or groups.get("ktrap"))
        return Crash(kind, number, clip(summary, 200), kernel=kernel)
    return None


# gdb's backtrace: ``#1  0x000014753985ae05 in abort () from /lib64/libc.so.6``, ``#0
# __GI_raise (sig=sig@entry=6) at ../sysdeps/unix/sysv/linux/raise.c:50``; a long frame goes on
# on the next line (``   from /path/lib.so``, ``    at file.cc:12``).
_GDB_FRAME_RE = re.compile(
    r"^#\d{1,4} +(?:0x[0-9a-fA-F]{1,16} in )?(?P<func>\S.{0,600}?)"
    r"(?: from (?P<lib>\S{1,400})| at (?P<src>\S{1,400}))?\s*$")
_GDB_MORE_RE = re.compile(r"^\s+(?:from ?(?P<lib>\S{1,400})|at (?P<src>\S{1,400}))\s*$")
# glibc's ``backtrace_symbols`` form, as signal handlers print it (Open MPI's "[host:pid] [ 2]
# /lib64/libc.so.6(abort+0x148)[0x2aecf88048f8]", UCX's " 2  /lib64/libc.so.6(abort+0x148)
# [0x7f...]", MPICH's "/lib/libmpi.so.12(+0x1d86514) [0x14763ac07514]"): the library, the
# function and offset in parentheses (the function may be missing), the address in brackets.
_SYMBOLS_FRAME_RE = re.compile(
    r"^(?:\[[^\]\s]{1,120}\] ?)?(?:\[ {0,3}\d{1,4}\] ?|\s*\d{1,4}\s+|\s+)?"
    r"(?P<lib>[^\s()\[\]]{1,400})\((?P<func>[^()\s+]{0,400})(?P<off>\+0x[0-9a-fA-F]{1,16})?\)"
    r" ?\[0x[0-9a-fA-F]{1,16}\]\s*$")
# The functions a process dies through on an abort: the C library's, the C++ runtime's (and
# UCX's handler of a fatal signal or error, which prints the frames then ends the process).
_FATAL_FUNC_RE = re.compile(
    r"^ucs_(?:handle_error|error_signal_handler)\b|^(?:__GI_)?(?:raise|abort|gsignal)\b"
    r"|^__pthread_kill|^pthread_kill\b|^std::terminate\(\)"
    r"|^__GI___pthread_kill|^(?:__GI_)?__assert_fail")
_RUNTIME_FUNC_RE = re.compile(
    r"^(?:ucs_handle_error|ucs_error_signal_handler|__GI_|__libc_|__pthread_|pthread_kill|raise"
    r"|abort|gsignal|std::terminate|std::rethrow"
    r"|std::__|__cxxabiv1::|__gnu_cxx::|__cxa_|_Unwind_|__assert_fail|__fortify_fail"
    r"|__stack_chk_fail|__malloc_|malloc_printerr|_int_free|_int_malloc|start_thread\b"
    r"|clone3?\b|execute_native_thread_routine|\?\?)")
_RUNTIME_LIB_RE = re.compile(
    r"/lib(?:c|pthread|stdc\+\+|gcc_s|m|dl|rt)[.-][^/]*$|/ld-linux[^/]*$|\.\./sysdeps/"
    r"|^(?:abort|raise|assert|pthread_kill)\.c:")


def backtrace_start(text: str) -> bool:
    """True for a backtrace frame (gdb's, or ``backtrace_symbols``') of a function a process
    dies through (``abort``, ``raise``, ``gsignal``, ``std::terminate``, ``__pthread_kill``,
    ``__assert_fail``)."""
    frame = _frame(text)
    return frame is not None and _FATAL_FUNC_RE.match(frame[0]) is not None


def _frame(text: str) -> tuple[str, str] | None:
    """A backtrace frame's function (as written, arguments included) and its library or
    source, in either form; None for any other line."""
    m = _GDB_FRAME_RE.match(text)
    if m is not None:
        return m.group("func"), m.group("lib") or m.group("src") or ""
    m = _SYMBOLS_FRAME_RE.match(text)
    if m is not None:  # a frame without its function is named by its offset in the library
        return m.group("func") or (m.group("off") or "?"), m.group("lib")
    return None


def _function(func: str) -> str:
    """A gdb frame's function without its argument list: ``fi_cq_read (cq=0x1, count=1)`` is
    ``fi_cq_read``; ``ns::f() ()`` is ``ns::f()``."""
    func = func.strip()
    if not func.endswith(")"):
        return func
    depth = 0
    for i in range(len(func) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(func[i], 0)
        if depth == 0:
            return func[:i].rstrip() or func
    return func


class BacktraceReport(Report):
    """A backtrace through an abort (gdb's, or a signal handler's ``backtrace_symbols``): its
    frames, read until a line that is not one."""

    kind = "backtrace"

    def __init__(self, first: LineIn, *, hold: float, now: float) -> None:
        super().__init__(first, now + hold)
        self.line = first
        self.frames: list[tuple[str, str]] = []  # (function, library or source), innermost first
        self.feed(first, now)

    def feed(self, line: LineIn, now: float) -> bool:
        _ = now
        more = _GDB_MORE_RE.match(line.text)
        if more is not None and self.frames:
            func, _where = self.frames[-1]
            self.frames[-1] = (func, more.group("lib") or more.group("src") or "")
            return True
        frame = _frame(line.text)
        if frame is None:
            self.finished = True
            return False
        if len(self.frames) < 64:
            self.frames.append((_function(frame[0]), frame[1]))
        return True

    def held(self) -> int | None:
        return self.line.offset

    def culprit(self) -> str:
        """The innermost frame outside the C and C++ runtimes ("" if every frame is theirs)."""
        for func, where in self.frames:
            if _RUNTIME_FUNC_RE.match(func) or (where and _RUNTIME_LIB_RE.search(where)):
                continue
            lib = where.rsplit("/", 1)[-1]
            return clip(f"{func} ({lib})" if lib else func, 200)
        return ""

    def crash(self) -> Crash:
        culprit = self.culprit()
        summary = f"abort in {culprit}" if culprit else "abort"
        return Crash("abort", 6, clip(f"{summary}: {self.line.text.strip()}", 200))
