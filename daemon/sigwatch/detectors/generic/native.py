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
  PID``, ``exit code 137``, mpirun's ``exited on signal 11``, ``MPI_ABORT was invoked``.

A signal someone sends to stop a process (SIGTERM, SIGINT, SIGHUP, SIGUSR*) is not a crash: it is
reported at info level, and a child that exits on SIGINT (Ctrl-C) not at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sigwatch.detectors.generic._text import SIGNALS, clip, signal_name

__all__ = ["Crash", "match_crash"]

# Signals that mean the process crashed or was killed hard; the rest are a stop request.
CRASH_SIGNALS = frozenset({4, 5, 6, 7, 8, 9, 11, 24, 25, 31})
_QUIET_SIGNALS = frozenset({2})  # Ctrl-C by hand
_NAME_TO_NUMBER = {name: number for number, name in SIGNALS.items()}
_KERNEL_TRAPS = {"segfault": 11, "general protection fault": 11, "stack segment": 11,
                 "divide error": 8, "invalid opcode": 4, "int3": 5}
_SHELL_WORDS = {
    "segmentation fault": 11, "bus error": 7, "floating point exception": 8,
    "illegal instruction": 4, "illegal hardware instruction": 4, "aborted": 6, "abort": 6,
    "killed": 9, "trace/breakpoint trap": 5, "terminated": 15, "hangup": 1, "quit": 3,
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
    signal: int | None
    summary: str
    kernel: bool = False  # a kernel message: only news where the kernel says it

    @property
    def fatal(self) -> bool:
        """A crash (error), not a stop request (info)."""
        return self.signal is None or self.signal in CRASH_SIGNALS

    @property
    def quiet(self) -> bool:
        return self.signal in _QUIET_SIGNALS


_SHELL_WORD = (r"(?P<word>Segmentation fault|Bus error|Floating point exception|Illegal instruction"
               r"|Aborted|Killed|Trace/breakpoint trap|Terminated|Hangup|Quit"
               r"|CPU time limit exceeded|File size limit exceeded|Bad system call"
               r"|段错误|总线错误|浮点数例外|浮点数异常|非法指令|非法的指令|已放弃|已杀死"
               r"|追踪与中断点陷阱|已终止)")
_ZSH_WORD = (r"(?P<zword>segmentation fault|bus error|floating point exception"
             r"|illegal hardware instruction|abort|killed|trace trap|terminated|hangup)")
_SHELL_RE = re.compile(
    # bash: the report alone, with a job number, or "script: line N: PID <word>  command"
    r"^(?:\[\d{1,4}\][+-]? +)?(?:\S{1,200}: (?:line|行) \d{1,7}: *)?(?:\d{1,10} +)?"
    + _SHELL_WORD + r"(?P<core> ?\((?:core dumped|核心已转储)\))?(?:(?: {2,}|\t)\S.{0,300})?$"
    # zsh: "zsh: segmentation fault (core dumped)  python x.py", "[1]  1234 killed  python"
    r"|^(?:zsh: |\[\d{1,4}\] +\d{1,10} )" + _ZSH_WORD + r"(?: \(core dumped\))? +\S")
_PHRASE_RES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rx)) for kind, rx in (
        ("abort", (r"terminate called (?:after throwing an instance of '(?P<what>[^']{1,200})'"
                   r"|recursively|without an active exception)")),
        ("abort", (r"^(?:\*\*\* )?(?P<what>double free or corruption"
                   r"|free\(\): invalid (?:pointer|size)|munmap_chunk\(\): invalid pointer"
                   r"|malloc\(\): (?:corrupted|memory corruption)[^*]{0,60}"
                   r"|corrupted size vs\. prev_size|stack smashing detected"
                   r"|pure virtual method called)")),
        ("signal", (r"\*\*\* (?P<sig>SIG[A-Z]{2,6}) (?:\(@[^)]{1,40}\) )?"
                    r"received (?:at time|by PID)")),
        ("signal", r"\*\*\* Aborted at \d{1,12} \(unix time\)"),
        ("check", r"\*\*\* Check failure stack trace: \*\*\*"),
        ("check", r"(?:^|[\]:] )(?:CHECK|Check) failed: (?P<what>\S.{0,200})"),
        # glibc's __assert_fail (and CUDA's device-side assert, which prints the same way)
        ("check", r"Assertion [`'](?P<what>.{1,200})' failed\.?\s*$"),
        ("signal", r"Program received signal (?P<sig>SIG[A-Z]{2,6})"),
        ("signal", r"\bSignal (?P<num>\d{1,2}) \((?P<sig>SIG[A-Z]{2,6})\) received by PID"),
        ("signal", (r"(?:exited|died|terminated|killed|was killed|exits?) (?:with|by|on) "
                    r"(?:the )?signal[: ]+(?:(?P<sig>SIG[A-Z]{2,6})|-?(?P<num>\d{1,2})\b"
                    r"|(?P<sword>Killed|Segmentation fault|Aborted|Bus error|Terminated"
                    r"|Floating point exception|Illegal instruction))")),
        ("signal", r"died with <Signals\.(?P<sig>SIG[A-Z]{2,6}): \d{1,2}>"),
        ("signal", r"received signal (?P<sig>SIG[A-Z]{2,6})(?:, terminating| \(\d+\))"),
        ("signal", (r"\b(?:exit ?code|exitcode|return ?code|returncode|exit status|exit_code)"
                    r"\s*[:=]?\s*-(?P<num>\d{1,2})\b")),
        ("signal", (r"\b(?:exit(?:ed)? (?:with )?(?:code|status)|exitcode|return code|returncode)"
                    r"\s*[:=]?\s*(?P<code>1[3-5]\d)\b")),
        ("signal", r"\[signal (?P<sig>SIG[A-Z]{2,6}): "),
        ("abort", r"MPI_ABORT was invoked on rank \d{1,7}"),
        # the MPI error handlers: Open MPI's "*** An error occurred in MPI_Init ...
        # MPI_ERRORS_ARE_FATAL", MPICH's "Abort(1234) on node 7 (rank 7 in comm 0): Fatal error"
        ("abort", (r"\*\*\* An error occurred in MPI_\w{1,40}|MPI_ERRORS_ARE_FATAL"
                   r"|\bAbort\(\d{1,12}\) on node \d{1,7}")),
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
        ("runtime_panic", r"^panic: (?P<what>\S.{0,200})$"),
        ("runtime_panic", r"^fatal error: (?P<what>\S.{0,200})$"),
        ("runtime_panic", r"thread '[^']{0,80}' panicked at"),
        ("runtime_panic", (r"^Exception in thread \"[^\"]{1,80}\" (?P<what>[\w.$]{1,120}"
                           r"(?:Error|Exception)\b.{0,200})")),
    ))


# Literals one of which every phrase above contains (case as written): a line with none of them
# skips the phrases (most error lines; the shell report is anchored and cheap). The test
# ``test_generic_native`` checks the phrases against every line of the corpora with and
# without this.
_PHRASE_HINTS = re.compile("|".join(re.escape(hint) for hint in (
    "terminate called", "double free", "free(): invalid", "munmap_chunk", "malloc(): ",
    "corrupted size", "stack smashing", "pure virtual", "***", "heck failed: ", "CHECK failed: ",
    "Assertion ", "signal", "Signal", "exit", "return", "MPI_", "Abort(", "Killed process",
    "segfault at", "general protection fault", "divide error", "invalid opcode",
    "stack segment", "int3", "process exited", "OOMKilled", "CrashLoopBackOff",
    "Back-off restarting", "panic", "fatal error: ", "Exception in thread")))


def _number(name: str | None, num: str | None) -> int | None:
    if num is not None:
        return int(num)
    if name is not None:
        return _NAME_TO_NUMBER.get(name)
    return None


def match_crash(text: str, *, hints: bool = True) -> Crash | None:
    """The crash ``text`` reports, or None (``hints=False``: try every phrase, for tests)."""
    m = _SHELL_RE.search(text)
    if m is not None:
        word = (m.group("word") or m.group("zword") or "").lower()
        number = _SHELL_WORDS.get(word, 5 if word == "trace trap" else None)
        return Crash("signal", number, clip(text, 200))
    if hints and _PHRASE_HINTS.search(text) is None:
        return None
    for kind, pattern in _PHRASE_RES:
        found = pattern.search(text)
        if found is None:
            continue
        groups = found.groupdict()
        number = _number(groups.get("sig"), groups.get("num"))
        if groups.get("sword"):
            number = _SHELL_WORDS.get(str(groups["sword"]).lower())
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
        if number is not None and kind == "signal":
            summary = f"{signal_name(number)}: {text}"
        kernel = "Killed process" in found.group() or bool(groups.get("kseg")
                                                            or groups.get("ktrap"))
        return Crash(kind, number, clip(summary, 200), kernel=kernel)
    return None
