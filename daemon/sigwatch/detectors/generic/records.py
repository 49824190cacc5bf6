"""Error- and fatal-level records in the log formats training stacks write, and their component.

``parse_record`` reads one line (launcher prefix already removed) and returns a ``Record`` when
the line is a log record at error level or above, in one of the formats below; ``classify``
names the component the record is about from its vocabulary. The formats were read from the
projects' own format strings:

- Python ``logging``: ``ERROR:name:msg`` (``BASIC_FORMAT``) and any format that puts the level
  near the start after a timestamp and a name (``2024-.. - name - ERROR - msg``,
  ``[2024-..][ERROR] msg``, Omniverse Kit's ``2024-.. [11,526ms] [Error] [omni.physx] msg``,
  vLLM's ``ERROR 01-02 12:00:00 [file.py:12] msg``, Ray's
  ``2024-..\\tERROR worker.py:12 -- msg``, Hugging Face's ``[ERROR|file.py:12] ...``);
- glog / absl / klog: ``E1120 12:00:00.123456  1234 file.cc:12] msg`` (and ``F``), TensorFlow's
  ``2024-..: E path/file.cc:12] msg``, PyTorch c10's ``[E socket.cpp:610] msg``;
- loguru: ``2024-.. | ERROR    | module:function:12 - msg``, and the same columns with the level
  in lowercase (``2025-.. | critical |   Always | TT_FATAL: ...``);
- Ray's C++ (spdlog) logs: ``[2024-.. 12:00:00,123 E 1234 5678] file.cc:12: msg``;
- CANN plog and MindSpore: ``[ERROR] RUNTIME(1234,python):2024-.. [file.cc:12]... msg``,
  ``[ERROR] ME(1234:...,MainProcess):2024-.. [file.cc:12] func] msg``;
- TensorRT / TensorRT-LLM: ``[TRT] [E] msg``, ``[TensorRT-LLM][ERROR] msg``;
- Go: logrus / logfmt / slog ``level=error msg="..."``, zap JSON ``"level":"error"``, and
  logrus's terminal format (``TextFormatter`` on a TTY, or with colours forced): the level cut to
  four letters, then the seconds since start or a full stamp in brackets
  (``ERRO[0000] msg   key=value``, ``FATA[2024-01-02T10:00:00Z] msg``);
- programs: ``srun: error: msg``, ``slurmstepd: error: msg``, ``docker: Error response from
  daemon: msg``, ``nvidia-container-cli: initialization error: msg``;
- C libraries that put the level after the source location: UCX's ``[ts] [host:pid:tid]
  rc_iface.c:492 UCX ERROR msg`` and Open MPI's ``[host:pid] pml_ucx.c:291 Error: msg``;
- libfabric's ``libfabric:PID:TS::prov:subsys:func():LINE<warn> msg``: libfabric has no error
  level (warn is its highest), so a warn record that reports an error status (``err: 5``,
  ``failed``, ``error``) is read as an error, unless a teardown function (``..._close()``,
  ``..._free()``) wrote it;
- Google Cloud's log viewer's lines (Vertex AI): it shows whatever a replica wrote to stderr at
  ``ERROR``; the level is read from the message itself;
- Go's standard ``log`` (``2018/11/27 03:44:12 msg``), which has no level, and any line of a
  stamp and a message without a level: a message that says a failure in its first words and
  names its cause (``Could not start X: <cause>``, ``Failed to X: <cause>``, ``GRPC server
  crashed with error: <cause>``) is read as an error
  (``form = "statement"``), unless it says what it does instead (skipping, falling back).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from sigwatch.detectors.generic._text import ISO_STAMP, literal_first

__all__ = ["COMPONENTS", "Record", "classify", "exhausts_memory", "level_of", "parse_any",
           "parse_record"]

COMPONENTS = ("accelerator_runtime", "collective", "interconnect", "storage", "scheduler",
              "container_runtime", "other")
"""The closed set of components a record is classified into (a label value)."""

_LEVELS = {
    "F": "fatal", "C": "fatal", "CRITICAL": "fatal", "CRIT": "fatal", "FATAL": "fatal",
    "EXCEPTION": "fatal", "SEVERE": "fatal", "EMERG": "fatal", "ALERT": "fatal",
    "PANIC": "fatal", "DPANIC": "fatal",
    "E": "error", "ERROR": "error", "ERR": "error",
    "W": "warning", "WARNING": "warning", "WARN": "warning",
    "I": "info", "INFO": "info", "NOTICE": "info", "EVENT": "info",
    "D": "debug", "DEBUG": "debug", "T": "debug", "TRACE": "debug", "V": "debug",
}


@dataclass(frozen=True, slots=True)
class Record:
    """One log record at error level or above."""

    level: str  # "debug" | "info" | "warning" | "error" | "fatal"
    form: str  # which format: glog, python, loguru, ray, cann, bracket, logfmt, json, program
    source: str  # the logger, module, file or program the record names ("" when none)
    message: str


def _level(token: str) -> str:
    """The level a format's token names ("" for a word that is not a level)."""
    return _LEVELS.get(token.strip('"').upper(), "")


_GLOG_RE = re.compile(
    # an envelope glog does not write may come first ("(pid=raylet) ", "[80748] [rank0]:")
    r"^(?:[^\s]{0,40}[\s\]:)]{1,2}){0,3}?\[?(?P<L>[IWEF])\d{3,4} \d\d:\d\d:\d\d+(?:\.\d+)?"
    r"(?:\s+\d+){0,2}\s+(?P<src>[^\s:\]]{1,160}):\d{1,6}\]\s?(?P<msg>.*)$")
_TF_RE = re.compile(
    # (a launcher's rank tag may come first: "[1] 2019-06-13 01:17:08.886805: E ...")
    r"^(?:\[\d{1,6}(?:,\d{1,6})?\] )?(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: |\s+)(?P<L>[IWEF]) "
    r"(?P<src>[\w./-]{1,160}):\d{1,6}\]"
    r" ?(?P<msg>.*)$")
_C10_RE = re.compile(r"^\[(?P<L>[IWEF]) (?P<src>[\w.]{1,80}):\d{1,6}\] ?(?P<msg>.*)$")
_RAY_RE = re.compile(
    r"^(?:\([\w.=-]{1,40}\)\s*)?\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<L>[TDIWEC]) \d+ \d+\]\s*"
    r"(?:\([\w.=-]{1,40}\)\s*)?(?:(?P<src>[\w.]{1,80}):\d{1,6}:\s*)?(?P<msg>.*)$")
_CANN_RE = re.compile(
    r"^\[(?P<L>ERROR|CRITICAL|EXCEPTION|FATAL|WARNING|INFO|DEBUG|EVENT)\]\s*"
    r"(?P<src>[A-Z][A-Z0-9_]{1,20})\([^)]{0,80}\)[:,]?"
    r"(?:\d{4}-\d\d-\d\d[-\d:.]{0,24}\s*)?(?:\[[^\]\s]{1,120}\]\s*)?(?P<msg>.*)$")
_PYTHON_RE = re.compile(
    r"^(?P<L>CRITICAL|ERROR|FATAL|WARNING|INFO|DEBUG):(?P<src>[^:\s]{1,100}):(?P<msg>.*)$")
_BRACKET_RE = re.compile(
    r"^(?P<pre>(?:\[[^\]\[]{1,60}\]\s*){1,4})\[\s*(?P<L>[EFWID]|(?i:error|err|fatal|critical"
    r"|exception|warning|warn|info|debug|trace))\s*\]\s*(?:\[[^\]\[]{1,40}\]\s*)?(?P<msg>.*)$")
# The same behind a date and time (NVIDIA Omniverse/Kit, Isaac Sim: ``2024-11-25 09:13:08
# [11,526ms] [Error] [omni.physx.plugin] msg``): the level is a bracketed word in any case,
# after at most three other bracketed fields; the field after it names the source.
_STAMPED_BRACKET_RE = re.compile(
    rf"^{ISO_STAMP}\s+"
    r"(?:\[[^\]\[]{1,60}\]\s*){0,3}\[\s*(?P<L>(?i:error|fatal|critical|exception|warning|warn"
    r"|info|debug|trace|verbose))\s*\]\s*(?:\[(?P<src>[^\]\[]{1,60})\]\s*)?(?P<msg>.*)$")
# "<component> error ...": a library's own error line ("MIOpen(HIP): Error [BuildOcl] ...",
# "HCCL demo error: ...", "NCCL failure common.cu:908 ...", "CUDA runtime error (59) : ...",
# "THCudaCheck FAIL file=...") and the bare "Error: ..." of command-line tools.
# Not a word of a sentence's middle, where prose mentions an error ("... will be treated /
# as an error in a future release", "raise an error"): an article, preposition or verb.
_PROSE = (r"(?!(?i:an?|the|as|is|was|were|be|been|with|of|in|on|at|to|for|by|from|no|not|any"
          r"|some|this|that|its?|if|or|and|but|than|such|raised?|throws?|treated|reports?"
          r"|returns?|logs?)\b)")
_COMPONENT_ERROR_RE = re.compile(
    rf"^(?:{_PROSE}(?P<src>[A-Za-z][\w.+/()-]{{0,40}})"
    rf"(?: {_PROSE}[A-Za-z][\w.+/()-]{{0,20}})?:? )?"
    r"(?P<L>[Ee]rror|ERROR|[Ff]ailure|FAILURE|FAIL|[Ff]atal [Ee]rror|FATAL(?: ERROR)?)"
    r"(?=[:\s\[(]|$)[:\s]*(?P<msg>.*)$")
_PROGRAM_RE = re.compile(
    r"^(?P<src>[A-Za-z][\w.+/-]{0,59}(?:\[\d{1,10}\])?): (?:\w{1,20} )?"
    r"(?P<L>error|fatal|ERROR|FATAL|Error|Fatal|warning|WARNING|Warning)"
    r"(?: response from daemon| \(\d{1,6}\))?: "
    r"(?P<msg>\S.*)$")
# The level after a C source location: UCX (``[ts] [host:pid:tid] file.c:NN MODULE LEVEL msg``,
# its levels from ucs/debug/log_def.h) and Open MPI's ``[host:pid] file.c:NN Error: msg``.
_LOCATED_RE = re.compile(
    r"^(?:\[[^\]\[]{1,80}\]\s*){1,3}(?P<src>[\w.+-]{1,80}\.(?:c|cc|cpp|cxx|h|hpp|cu|inl))"
    # (UCX's module names: "UCX", "TL_UCP", and UCC's lowercase pairs such as "cuda mc")
    r":\d{1,6}\s+(?:[A-Z][A-Z0-9_]{1,11}\s+|[a-z][a-z0-9_]{1,11} [a-z][a-z0-9_]{1,11}\s+)?"
    r"(?P<L>FATAL|ERROR|WARN|WARNING|DIAG|INFO|DEBUG|TRACE|Fatal|Error|Warning|error|warning)"
    r"(?::\s*|\s+)(?P<msg>\S.*)$")
_LIBFABRIC_RE = re.compile(
    r"^\s*libfabric:(?:\d{1,10}:\d{1,12}:)?(?:[^:\s]{0,40}:){1,3}(?P<src>[\w.]{1,80})\(\):"
    r"\d{1,6}<(?P<L>[a-z]{3,8})>\s*(?P<msg>.*)$")
# A provider's warn from its teardown (``cxip_ep_close(): Unable to free EP object -16``): the
# job is ending; what failed at close is not the job's failure.
_LIBFABRIC_TEARDOWN_RE = re.compile(r"(?:close|free|destroy|fini|cleanup)\w{0,20}$")
# Google Cloud's log viewer (Vertex AI, AI Platform custom jobs): every line a replica writes
# to stderr is shown at ERROR severity ("ERROR  2022-01-26 14:19:34 +1100  workerpool0-0
# 31%|###  | 5974/19120"); the line's own level, if it has one, is in its message.
_CLOUD_STDERR_RE = re.compile(
    r"^ERROR\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [+-]\d{4})?\s+"
    r"(?:workerpool\d{1,2}-\d{1,5}|(?:master|worker|ps|evaluator)-replica-\d{1,5})\s+(?P<msg>.*)$")
# An error status in a libfabric warn record (libfabric logs its errors at warn).
_LIBFABRIC_ERROR_RE = re.compile(
    r"(?i)\berr(?:no)?\s*[:=]\s*-?[1-9]|\berror\b|\bfail(?:ed|ure)?\b|\bunable to\b|\bcannot\b"
    r"|\bcould not\b")
# A level-less line: Go's standard log (``log.LstdFlags``, optionally ``Lmicroseconds`` and
# ``Lshortfile``) or an ISO 8601 stamp alone before the message.
_STAMPED_RE = re.compile(
    r"^(?:\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?"
    rf"|\[?{ISO_STAMP}\]?)"
    r"\s+(?:[\w.-]{1,60}\.go:\d{1,6}: )?(?P<msg>\S.*)$")
# A message that states a failure in its first words and names the cause after a colon; not
# one that says what it does instead (a fallback is not a failure of the process).
_STATEMENT_RE = re.compile(
    r"^(?:(?:Could not|Couldn't|Failed to|Unable to|Cannot|Can't|Error (?:while|when)) [^:]{2,120}"
    # or a subject and what became of it ("GRPC server crashed with error: <cause>")
    r"|[A-Za-z][\w .'/-]{1,60}? (?:crashed|failed|aborted|panicked)"
    r"(?: with (?:an? )?(?:error|exception|status|exit code)(?: -?\d{1,6})?)?)"
    r": (?!.*\b(?:skipping|ignoring|falling back|fall back|using default))"
    r"(?![\d.,]+%?\s*$)\S")  # a cause, not a count ("requests that failed: 0")
# The kernel's lines from an accelerator's or an interconnect's driver (dmesg, kern.log, the
# journal's kernel lines): ``[75287.3] amdgpu 0000:03:00.0: amdgpu: Failed to evict process
# queues``, ``mlx5_core 0000:61:00.0: wait_func:1132:(pid 9): CREATE_DCT(0x710) timeout``,
# ``NVRM: GPU0 _issueRpcAndWait: rpcSendMessage failed``. The text carries no level (``dmesg -x``
# would show it); such a driver saying that something failed, timed out or hung is read as an
# error record. Only these drivers: a display's, a disk's or an Ethernet card's complaints are
# not the training's, and their start-up noise is loud.
_KERNEL_DRIVER_RE = re.compile(
    r"^(?:\[ {0,12}\d{1,10}\.\d{1,9}\] )?(?:kernel: )?"
    r"(?P<src>amdgpu|amdkfd|NVRM|nvidia(?:-nvswitch\d{0,3}|-uvm|-modeset|-peermem)?|nvidia_uvm"
    r"|mlx5_core|mlx5_ib|mlx4_core|infiniband|ib_core|ib_uverbs|habanalabs|efa|hfi1|cxi_core)"
    r"(?: [\w:.-]{1,40})?: (?:[a-z][\w-]{1,20}: )?(?P<msg>\S.*)$")
_KERNEL_FAILURE_RE = re.compile(
    r"(?i)\bfail(?:ed|ure|s)?\b|\btimed? ?out\b|\btimeout\b|\bhung\b|\bhang\b"
    r"|\bnot responding\b|\bfatal\b|\berror\b")
# Known noise of those drivers: an unsigned module loaded, errors corrected, counters at zero,
# mlx5's firmware answering a query the card does not support (boot noise on healthy nodes),
# an APU's secure display firmware absent.
_KERNEL_BENIGN_RE = re.compile(
    r"(?i)module verification failed|tainting kernel|\bcorrected\b|\b0 errors?\b"
    r"|\berrors?(?: count)?\s*[:=]\s*0\b|\bno errors?\b|\bmlx5_cmd_(?:out_err|check)\b"
    r"|secure display")
# The kernel's warning splat inside one of those drivers' modules (``WARNING: CPU: 25 PID: 550 at
# .../osfunc.c:1191 OSWarnOn+0xf/0x20 [mtgpu]``): the driver reached a state it asserts never
# happens; and the records of the GPU drivers derived from PowerVR's (Moore Threads' ``MTGPU:
# (Error): ... experienced error Guilty Lockup``), whose level is in the line.
_GPU_MODULES = (r"nvidia(?:_uvm|_modeset|_drm|_peermem)?|amdgpu|amdkfd|mtgpu|habanalabs|mlx5_core"
                r"|mlx5_ib|ib_core")
_KERNEL_WARN_RE = re.compile(
    r"^(?:\[ {0,12}\d{1,10}\.\d{1,9}\] )?(?:kernel: )?WARNING: CPU: \d{1,5} PID: \d{1,10} at "
    r"\S{1,300} (?P<func>[\w.]{1,120})\+0x[0-9a-f]{1,8}/0x[0-9a-f]{1,8} \[(?P<src>"
    + _GPU_MODULES + r")\]")
_PVR_RE = re.compile(r"^(?:\[ {0,12}\d{1,10}\.\d{1,9}\] )?(?:kernel: )?(?P<src>MTGPU|PVR_K):"
                     r"\((?P<L>Error|Fatal)\): (?:\d{1,10}: )?(?P<msg>\S.*)$")
# NVIDIA's compiler tools (``ptxas fatal   : Value 'sm_110a' is not defined for option
# 'gpu-name'``, ``nvcc fatal   : Unsupported gpu architecture``, ``ptxas error   : Entry function
# uses too much shared data``; a suffixed build such as ``ptxas-blackwell``): Triton, XLA and
# extensions call them while a job starts or compiles a kernel.
_NV_TOOL_RE = re.compile(r"^(?P<src>ptxas|nvcc|nvlink|fatbinary|cicc|nvrtc)(?:-[\w.]{1,20})? "
                         r"(?P<L>fatal|error)\s{0,8}: (?P<msg>\S.*)$")
# AMD's HIP runtime (ROCclr) with AMD_LOG_LEVEL set: ``:1:memory.cpp :347 : 9616777840 us: 4277 :
# [tid:0x7f2a] Video memory allocation failed!``; the number after the first colon is the level
# (1 error, 2 warning, 3 info, 4 debug).
_ROCCLR_RE = re.compile(
    r"^:(?P<L>[1-4]):(?P<src>[\w.+-]{1,80}\.(?:cpp|cc|c|hpp|h))\s*:\s*\d{1,6}\s*:\s*\d{1,20} us:"
    r"\s*(?:\d{1,10}\s*:\s*)?(?:\[[^\]]{1,80}\]\s*)?(?P<msg>.*)$")
_ROCCLR_LEVELS = {"1": "error", "2": "warning", "3": "info", "4": "debug"}
# Slurm's daemons (slurmd, slurmstepd, slurmctld): "[2019-09-24T10:10:06.901] [321.0] error: pyxis:
# couldn't mkdir /run/pyxis/100005" (lowercase levels after the stamp and the job step).
_SLURM_RE = re.compile(
    r"^\[\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?\](?: \[[\w.]{1,40}\])? "
    r"(?P<L>error|fatal|debug\d?|verbose|info): (?P<msg>\S.*)$")
# Open MPI's, PRRTE's and PMIx's error macros (``ORTE_ERROR_LOG``, ``OPAL_ERROR_LOG``): ``[host:pid]
# [[jobid,0],0] ORTE_ERROR_LOG: Not found in file base/plm_base_launch_support.c at line 1234``
# (``PRTE_ERROR_LOG`` and ``PMIX_ERROR_LOG`` print ``PRTE ERROR: ...``, read as a header).
_MPI_ERROR_LOG_RE = re.compile(
    r"(?:^|[\s\]])(?P<src>ORTE|OPAL|PRTE|PMIX|OMPI)_ERROR_LOG:\s*(?P<msg>.*)$")
# logrus's TextFormatter with colours (``levelText[0:4]``, then ``[%04d]`` or ``[timestamp]``,
# then the message padded to 44 and the fields as key=value).
_LOGRUS_TTY_RE = re.compile(
    r"^(?P<L>PANI|FATA|ERRO|WARN|INFO|DEBU|TRAC)\[(?:\d{4,9}|\d{4}-\d\d-\d\d[^\]\s]{0,30})\] "
    r"(?P<msg>.*?)(?:\s{2,}(?=[\w.-]{1,40}=)(?P<fields>.*))?$")
_LOGRUS_LEVELS = {"PANI": "fatal", "FATA": "fatal", "ERRO": "error", "WARN": "warning",
                  "INFO": "info", "DEBU": "debug", "TRAC": "debug"}
_LOGFMT_RE = re.compile(
    r"(?:^|\s)level=\"?(?P<L>[a-zA-Z]{3,9})\b")
_LOGFMT_MSG_RE = re.compile(r"(?:^|\s)msg=(?:\"(?P<q>(?:[^\"\\]|\\.){0,500})\"|(?P<w>\S{1,200}))")
_LOGFMT_SRC_RE = re.compile(r"(?:^|\s)(?:component|logger|module|source|caller|name)="
                            r"\"?(?P<src>[^\s\"]{1,80})")
_JSON_RE = re.compile(r"\"(?:level|severity|levelname)\"\s*:\s*\"(?P<L>[a-zA-Z]{3,9})\"")
_JSON_MSG_RE = re.compile(r"\"(?:msg|message)\"\s*:\s*\"(?P<m>(?:[^\"\\]|\\.){0,500})\"")
_JSON_SRC_RE = re.compile(r"\"(?:logger|name|caller|component)\"\s*:\s*\"(?P<src>[^\"]{1,80})\"")

# Columns between pipes with the level in lowercase (loguru-style formats of C++ loggers, e.g.
# Tenstorrent's ``2025-11-26 19:48:22.915 | critical |   Always | TT_FATAL: ...``).
_PIPE_RE = re.compile(
    r"^[^|]{0,24}\d\d:\d\d:\d\d[^|]{0,16}\|\s{0,4}"  # a stamp with a time of day first
    r"(?P<L>critical|fatal|error|warning|warn|info|debug|trace)\s{0,12}\|"
    r"(?:\s{0,24}(?P<src>[^|\s][^|]{0,39}?)\s{0,4}\|)?\s*(?P<msg>\S.*)$")
# A level word where a format puts it: near the start, after a timestamp and at most two other
# words (a logger or host and program name), followed by a separator.
_LEVEL_RE = re.compile(
    r"(?<![\w./-])(?P<L>CRITICAL|ERROR|FATAL|EXCEPTION|SEVERE|EMERG|PANIC|ERR|CRIT|WARNING|WARN"
    r"|INFO|DEBUG|TRACE|NOTICE)"
    r"(?=[\s:\]|>)/-]|$)")
_STAMP_RE = re.compile(
    r"\d{2,4}[-/.]\d\d[-/.]\d\d(?:[T _-]?\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?)?(?:Z|[+-]\d\d:?\d\d)?"
    r"|\d\d:\d\d:\d\d(?:[.,]\d+)?|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d\d?"
    r"|\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b|\b(?:UTC|CST|GMT|[AP]M)\b")
_WORD_RE = re.compile(r"[A-Za-z_][\w.:/<>@=-]*")
_LEAD_SEP_RE = re.compile(r"^[\s:\]|>)-]+")
_WHERE_RE = re.compile(r"^\[(?P<src>[^\]\s]{1,120})\]\s*|^(?P<lsrc>[\w.<>]{1,80}):[\w.<>]{0,80}:"
                       r"\d{1,6} - |^\[(?P<hsrc>[\w.]{1,80}):\d{1,6}\]\s*")
_BASIC_AFTER_RE = re.compile(r":(?P<src>[A-Za-z_][\w.]{0,99}):(?=\S)")
MAX_PREFIX = 100


def _header_record(text: str) -> Record | None:
    m = _LEVEL_RE.search(text, 0, MAX_PREFIX + 12)
    if m is None or m.start() > MAX_PREFIX:
        return None
    prefix = text[: m.start()]
    words = _WORD_RE.findall(_STAMP_RE.sub(" ", prefix))
    if len(words) > 2 or (prefix and prefix[-1].isalnum()):
        return None
    after = text[m.end():]
    basic = _BASIC_AFTER_RE.match(after)
    if basic is not None:  # ``logging``'s BASIC_FORMAT behind a collector's stamp
        return Record(_level(m.group("L")), "python", basic.group("src"),
                      after[basic.end():].strip())
    rest = _LEAD_SEP_RE.sub("", after)
    src = words[-1].strip(":[]()") if words else ""
    where = _WHERE_RE.match(rest)
    if where is not None:
        src = where.group("src") or where.group("lsrc") or where.group("hsrc") or src
        rest = rest[where.end():]
    return Record(_level(m.group("L")), "python", src, rest.strip())


def parse_record(text: str) -> Record | None:
    """The record ``text`` is, when it is one at error level or above; else None."""
    record = parse_any(text)
    return record if record is not None and record.level in ("error", "fatal") else None


def level_of(text: str) -> str | None:
    """The level of the record ``text`` is (debug/info/warning/error/fatal), or None."""
    record = parse_any(text)
    return record.level if record is not None else None


def parse_any(text: str) -> Record | None:
    """The record ``text`` is, at any level, in one of the formats above; else None."""
    record = _parse(text)
    return record if record is not None and record.level else None


# A syslog file's header (``/var/log/syslog``, ``messages``, ``kern.log``: RFC 3164's stamp, or
# rsyslog's ISO one, then the host and the program with its pid) and the kernel's own stamp
# after it: the message after them is read as a line of its own.
_SYSLOG_RE = re.compile(
    r"^(?:(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d \d\d:\d\d:\d\d"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d))"
    r" [\w.-]{1,64} (?P<prog>[\w.@/()-]{1,60})(?:\[\d{1,10}\])?: "
    r"(?:\[ {0,12}\d{1,10}\.\d{1,9}\] )?")


def _parse(text: str) -> Record | None:
    if not text or text.startswith((">>> ", "...    ")):
        return None  # an interactive session's input (a prompt or its continuation), not output
    head = text[0]
    if head in "[kW" and (warn := _KERNEL_WARN_RE.match(text)) is not None:
        # before the other forms: its ``WARNING:`` is the kernel's, not a logger's
        return Record("error", "kernel", warn.group("src"),
                      f"kernel warning in {warn.group('func')} [{warn.group('src')}]")
    if head == ":" and (rocclr := _ROCCLR_RE.match(text)) is not None:
        return Record(_ROCCLR_LEVELS[rocclr.group("L")], "rocclr", f"hip {rocclr.group('src')}",
                      rocclr.group("msg").strip())
    if head == "E" and (cloud := _CLOUD_STDERR_RE.match(text)) is not None:
        return _parse(cloud.group("msg"))  # the severity is the stream's, not the line's
    if head in "JFMASOND2" and (syslog := _SYSLOG_RE.match(text)) is not None:
        inner = _parse(text[syslog.end():])
        if inner is not None and inner.level:
            return inner if inner.source else dataclasses.replace(inner, source=syslog["prog"])
    if head in "IWEF[(0123456789 \t" or " E" in text[:80] or "[E" in text[:80]:
        for form, pattern in (("glog", _GLOG_RE), ("glog", _TF_RE), ("glog", _C10_RE),
                              ("ray", _RAY_RE)):
            m = pattern.match(text)
            if m is not None:
                src = m.group("src") or ""
                return Record(_level(m.group("L")), form, src, m.group("msg").strip())
    if head == "[":
        m = _SLURM_RE.match(text)
        if m is not None:
            return Record(_level(m.group("L")), "slurm", "slurm", m.group("msg").strip())
        m = _CANN_RE.match(text)
        if m is not None:
            return Record(_level(m.group("L")), "cann", m.group("src"), m.group("msg").strip())
        m = _BRACKET_RE.match(text)
        if m is not None:
            pre = m.group("pre").strip()
            src = pre[1:pre.index("]")]
            return Record(_level(m.group("L")), "bracket", src, m.group("msg").strip())
        m = _LOCATED_RE.match(text)
        if m is not None:
            return Record(_level(m.group("L")), "located", m.group("src"),
                          m.group("msg").strip())
    if head == "2" and "[" in text[:60]:
        m = _STAMPED_BRACKET_RE.match(text)
        if m is not None:
            level = "debug" if m.group("L").lower() == "verbose" else _level(m.group("L"))
            return Record(level, "bracket", m.group("src") or "", m.group("msg").strip())
    m = _PYTHON_RE.match(text)
    if m is not None:
        return Record(_level(m.group("L")), "python", m.group("src"), m.group("msg").strip())
    if text[4:5] == "[":
        m = _LOGRUS_TTY_RE.match(text)
        if m is not None:
            return Record(_LOGRUS_LEVELS[m.group("L")], "logrus", "", m.group("msg").strip())
    if "libfabric:" in text[:24]:
        m = _LIBFABRIC_RE.match(text)
        if m is not None:
            level, message = _level(m.group("L")), m.group("msg").strip()
            if (level == "warning" and _LIBFABRIC_ERROR_RE.search(message)
                    and not _LIBFABRIC_TEARDOWN_RE.search(m.group("src"))):
                level = "error"
            return Record(level, "libfabric", f"libfabric {m.group('src')}", message)
    if "level" in text:
        lf = _LOGFMT_RE.search(text)
        if lf is not None:
            msg = _LOGFMT_MSG_RE.search(text)
            src = _LOGFMT_SRC_RE.search(text)
            message = (msg.group("q") or msg.group("w") or "") if msg else text
            return Record(_level(lf.group("L")), "logfmt", src.group("src") if src else "",
                          message.strip())
        js = _JSON_RE.search(text)
        if js is not None:
            jmsg = _JSON_MSG_RE.search(text)
            jsrc = _JSON_SRC_RE.search(text)
            return Record(_level(js.group("L")), "json", jsrc.group("src") if jsrc else "",
                          (jmsg.group("m") if jmsg else text).strip())
    m = _PROGRAM_RE.match(text)
    if m is not None:
        return Record(_level(m.group("L")), "program", m.group("src"), m.group("msg").strip())
    if "_ERROR_LOG:" in text[:200]:
        m = _MPI_ERROR_LOG_RE.search(text, 0, 200)
        if m is not None:
            return Record("error", "mpi", m.group("src"), m.group("msg").strip())
    if "|" in text[:60]:
        m = _PIPE_RE.match(text)
        if m is not None:
            return Record(_level(m.group("L")), "pipe", (m.group("src") or "").strip(),
                          m.group("msg").strip())
    if head in "pncf" and (tool := _NV_TOOL_RE.match(text)) is not None:
        return Record(_level(tool.group("L")), "component", f"cuda {tool.group('src')}",
                      tool.group("msg").strip())
    record = _header_record(text)
    if record is not None:
        return record
    if head.isdigit() or head == "[":
        m = _STAMPED_RE.match(text)
        if m is not None:
            message = m.group("msg")
            if _STATEMENT_RE.match(message):
                return Record("error", "statement", "", message.strip())
            return None
    m = _COMPONENT_ERROR_RE.match(text)
    if m is not None:
        level = "fatal" if m.group("L").lower().startswith("fatal") else "error"
        return Record(level, "component", m.group("src") or "", m.group("msg").strip())
    if head in "[kaNnmiIhec":
        m = _KERNEL_DRIVER_RE.match(text)
        if m is not None:
            message = m.group("msg")
            if _KERNEL_FAILURE_RE.search(message) and not _KERNEL_BENIGN_RE.search(message):
                return Record("error", "kernel", m.group("src"), message.strip())
    if head in "[kMP":
        m = _PVR_RE.match(text)
        if m is not None:
            return Record(_level(m.group("L")), "kernel", m.group("src").lower(),
                          m.group("msg").strip())
    return None


# -- components ---------------------------------------------------------------------------------

# Tried in this order: the most specific subject first (an NCCL line about an IB port is about
# the interconnect; "no space left on device" is storage, not an accelerator).
VOCABULARY_WORDS: tuple[tuple[str, str], ...] = (
    ("interconnect", (
     r"infiniband|\bib(?:_\w+|v\w*)?\b|\bmlx\d|\brdma|\broce\b|\befa\b|libfabric|\bofi\b"
     r"|net/ofi|net/ib|\bfi_[a-z]|ucx|\bucp\b|\bucp_|\bbtl_|\bmtl_|nvlink|nvswitch"
     r"|fabric ?manager|\bhccs\b"
     r"|\bcqe\b|port (?:down|flap)|link (?:is )?(?:down|flap)|\bqp\b|\bverbs\b|hccp|\broce"
     # KV-cache transfer engines of disaggregated serving (Mooncake, NIXL) and their words
     r"|mooncake|\bnixl|transfer.?engine|kvtransfer|\btransfer(?:_| )fail")),
    ("storage", (
     r"\bnfs\d?\b|lustre|gpfs|beegfs|weka|ceph|\bs3\b|\bgcs\b|hdfs|\bblob\b|\bdisk\b"
     r"|filesystem|file system|no space left|enospc|\beio\b|input/output error|i/o error"
     r"|read-only file system|stale file handle|\bmount\b|quota|checkpoint|\bfsync\b")),
    ("container_runtime", (
     r"docker|containerd|cri-o|\bcrio\b|\brunc\b|podman|kubelet|\bpod\b|oci runtime"
     r"|nvidia-container|container toolkit|enroot|pyxis|singularity|apptainer|image pull"
     r"|crashloopbackoff|back-off restarting|device.plugin")),
    ("scheduler", (
     r"slurm|\bsrun\b|\bsalloc\b|sbatch|scontrol|\bpbs\b|\blsf\b|torque|kube-scheduler|raylet"
     r"|gcs_server|\byarn\b|torchelastic|elastic agent|distributed\.elastic|torchrun"
     r"|rendezvous")),
    ("collective", (
     r"nccl|rccl|hccl|\bhcl\b|gloo|\bmpi\b|mpi_|oneccl|\bccl\b|c10d|processgroup"
     r"|all_?reduce|all_?gather|reduce_?scatter|alltoall|collective|horovod|nvshmem|\bpml_"
     r"|\bcoll_|bkcl|\bxccl|\bccom\b|\benc:\w|\bnec_dev\b"  # (Neuron's collectives: CCOM, ENC)
     # Open MPI's runtime and launchers: ORTE, PRRTE (``PRTE ERROR``), PMIx, OPAL, mpirun
     r"|\borte\b|orte_|\bprte\b|prrte|\bpmix|\bopal_|\bompi|\bmpirun\b|mpiexec")),
    ("accelerator_runtime", (
     r"cuda|cudnn|cublas|nvrtc|nvml|nvidia|\bgpus?\b|\bhip\b|rocm|\bhsa\b|miopen|rocblas"
     r"|amdgpu|\bxla\b|\btpus?\b|pjrt|\bnpus?\b|ascend|aicore|aicpu|\bacl\b|\bcann\b"
     r"|level.zero|\bze_|sycl|\bxpu|habana|\bhpu|synapse|gaudi|tensorrt|\btrt\b"
     r"|\bdevice\b|\becc\b|\bxid\b|\bdrv\b|\baclnn"
     # AWS Neuron's runtime (nrt), Moore Threads (MUSA), Kunlun's XPU runtime
     r"|\bnrt\b|nrt::|nrt_|\bnmgr\b|neuron|\bmusa|mtgpu|xpurt|\bnvrm\b"
     # AMD's BLAS and code objects, cuRAND, DCGM's host engine
     r"|hipblas|\bamdgcn|\bgfx\d{3,4}|curand|\bdcgm|host engine")),
)
_VOCABULARY = tuple((name, re.compile(literal_first(words)))
                    for name, words in VOCABULARY_WORDS)
# CANN plog module names (the second word of ``[ERROR] RUNTIME(...)``).
_CANN_MODULES = {
    "HCCL": "collective", "HCCP": "interconnect", "ROCE": "interconnect",
    "RUNTIME": "accelerator_runtime", "ASCENDCL": "accelerator_runtime",
    "DRV": "accelerator_runtime", "GE": "accelerator_runtime", "FE": "accelerator_runtime",
    "TBE": "accelerator_runtime", "AICPU": "accelerator_runtime", "TSD": "accelerator_runtime",
    "TDT": "accelerator_runtime", "DVPP": "accelerator_runtime", "TEFUSION": "accelerator_runtime",
    "OP": "accelerator_runtime", "ATRACE": "accelerator_runtime",
}


# Memory exhaustion in an accelerator runtime's own words (MindSpore's ``... is more than total
# mem size``, ``exceeds total mem``, CANN's ``Malloc device memory failed``, ``Device memory
# isn't enough``, ``alloc ... failed``, ``Out of Memory``, and ``显存不足`` / ``内存不足``): a
# record of an otherwise unnamed component that says so is about accelerator memory, unless it
# names the host's memory (``host``, ``cpu``, ``swap``, ``cgroup``: the kernel's OOM shapes).
_CLAUSE = r"(?:[^.;]|\.(?=\d))"  # within one clause (a decimal point does not end it)
MEMORY_EXHAUSTION_WORDS = (
    r"(?:exceed(?:s|ed|ing)?|(?:is |are )?(?:more|greater|larger|bigger) than) (?:the )?"
    r"(?:total|max(?:imum)?|available|free|device|usable|capacity|limit)[\w ]{0,24}?mem"
    rf"|malloc{_CLAUSE}{{0,80}}?fail"
    rf"|m?alloc(?:ate|ation)?[\w ]{{0,30}}?mem\w*{_CLAUSE}{{0,60}}?fail"
    rf"|mem(?:ory)? m?alloc\w*{_CLAUSE}{{0,60}}?fail"
    rf"|fail\w*(?: to)? m?alloc\w*{_CLAUSE}{{0,40}}?mem"
    r"|out of (?:device |gpu |npu |hbm )?mem(?:ory)?\b|oom when allocating"
    r"|memory (?:is(?:n't| not)|not) (?:enough|sufficient)|not enough (?:\w+ )?memory"
    r"|insufficient (?:\w+ )?memory|memory (?:is )?(?:exhausted|insufficient)"
    r"|显存不足|内存不足|显存溢出|内存溢出|(?:内存|显存)(?:申请|分配)失败|(?:申请|分配)(?:内存|显存)失败"
    r"|(?:超出|超过)[^\uff0c,\u3002]{0,12}(?:内存|显存)")
_MEMORY_EXHAUSTION = re.compile(MEMORY_EXHAUSTION_WORDS)
_HOST_MEMORY = re.compile(r"host|cpu|swap|cgroup|\bram\b|system memory|oom.killer|pinned|主机")


def exhausts_memory(message: str) -> bool:
    """True when ``message`` (lowercased) says an accelerator's memory ran out: an allocation
    failed or the memory in use would exceed the total, in the runtime's own words."""
    return (_MEMORY_EXHAUSTION.search(message) is not None
            and _HOST_MEMORY.search(message) is None)


def classify(record: Record) -> str:
    """The component a record is about, from the words of its source and message."""
    if record.form == "cann" and record.source in _CANN_MODULES:
        return _CANN_MODULES[record.source]
    words = f"{record.source} {record.message}".lower()
    for name, pattern in _VOCABULARY:
        if pattern.search(words) is not None:
            return name
    if exhausts_memory(words):
        return "accelerator_runtime"
    return "other"
