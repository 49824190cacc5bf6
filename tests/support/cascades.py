"""Failure cascades of a multi-node training job: what every node's logs say when it dies.

A cascade is the output of one job (``Layout``: a job id, its nodes, ranks per node) around
one root fault, line by line, each with the node and file it lands in, the true time the event
happened and the true time the line reaches its file. Timestamps inside a line are rendered
on the node's own clock (``skew`` seconds off, up to 2 s), so a reader sees what a fleet with
NTP drift shows. The wordings are the real ones: PyTorch's NCCL watchdog across releases
(``RELEASES``), torchrun's agent, the NVIDIA driver and mlx5 in the kernel log, NCCL's IB
transport, Python tracebacks.

The root faults (``KINDS``), and what a correct verdict says (``Expected``):

- ``xid79``: a GPU of node N falls off the bus (kernel log); the ranks of N hang or fail on
  CUDA, every other rank times out in the next collective, torchrun reports ChildFailedError
  on every node. Culprit: node N, ``owner="node"``. The kernel lines may be written late
  (``late`` seconds after the job's first other error line: after the node's CUDA errors or the
  others' timeouts), with their own, earlier, time.
- ``laggard``: no hardware fault; one rank stops entering collectives, the others time out
  waiting for it. From PyTorch 2.3 the stuck rank prints its own figures on the others' dump
  signal (last enqueued one below theirs). Culprit: that rank and its node, ``owner="unknown"``.
- ``ib_port``: an InfiniBand port of node N goes down: the kernel's mlx5 module event, NCCL's
  local errors on N's ranks at once, the peers' retry-exceeded completions seconds later,
  then timeouts. Culprit: node N, ``owner="fabric"``.
- ``user_all``: the same Python exception on every rank at the same step. ``owner="user"``,
  no node named.
- ``user_one``: a Python exception on one rank; the others time out waiting for it.
  ``owner="user"``, no node named.
- ``straggler``: node N runs ``slowdown`` (1.4x) slower than the others; nothing fails.

``generate(kind, layout, rng, ...)`` makes one; ``random_cascade(rng, ...)`` draws the kind, the
culprit, the timing, the noise, the skew and the wording. ``CascadeWriter`` writes a cascade
into per-node log folders in real time (for the end-to-end test); the scoring script feeds
the same lines to in-process daemons on simulated clocks.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

__all__ = ["JOB_LOGS", "KERNEL_FILE", "KINDS", "RELEASES", "Cascade", "CascadeWriter",
           "Expected", "Layout", "Line", "generate", "random_cascade", "steady"]

# PyTorch releases whose NCCL watchdog wordings differ (ProcessGroupNCCL.cpp): 1.13 and 2.1
# print "[Rank r]" with no per-rank figures; 2.2 adds "Timeout at NCCL work: ..." and the
# torchrun "[rankN]:" prefix; 2.4 prints glog timestamps and "[PG 0 Rank r]", and the stuck
# rank answers the others' dump signal with its own figures; 2.6 says "[PG ID 0 PG GUID
# 0(default_pg) Rank r]" and "Received a dump signal due to a collective timeout from rank t".
RELEASES = ("1.13", "2.1", "2.2", "2.4", "2.6")
KINDS = ("xid79", "laggard", "ib_port", "user_all", "user_one", "straggler")
MAX_SKEW = 2.0
STEP_SECONDS = 0.8

_PROGRAM = "/workspace/llm/pretrain.py"
_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class Layout:
    """A job's placement: ``ranks_per_node`` consecutive global ranks on each node, in order."""

    job: str
    nodes: tuple[str, ...]
    ranks_per_node: int = 4

    @property
    def world(self) -> int:
        return len(self.nodes) * self.ranks_per_node

    def node_of(self, rank: int) -> str:
        return self.nodes[rank // self.ranks_per_node]

    def ranks_of(self, node: str) -> range:
        first = self.nodes.index(node) * self.ranks_per_node
        return range(first, first + self.ranks_per_node)

    def rank_file(self, rank: int) -> str:
        return f"jobs/{self.job}/rank{rank}.log"

    def launcher_file(self) -> str:
        return f"jobs/{self.job}/launcher.log"


KERNEL_FILE = "kernel/kern.log"
JOB_LOGS = r"/jobs/(?P<job>[^/]+)/(?:rank(?P<rank>\d+)|launcher)\.log$"
"""``labels_from_path`` for the layout: the job from the folder, the rank from the file."""


@dataclass(frozen=True)
class Line:
    """One line: where it lands, when it happened, when it is written, and its text."""

    node: str
    file: str
    happened: float
    written: float
    text: str
    fault: bool = False  # an error-level line the verdict may rely on (for latency figures)


@dataclass(frozen=True)
class Expected:
    """What a correct verdict says about the cascade's job."""

    owner: str                          # node | fabric | user | unknown
    culprit_node: str                   # "" when no node is to blame
    culprit_ranks: frozenset[str]       # acceptable culprit_rank values ("" = not known)
    signatures: frozenset[str]          # acceptable culprit signatures (empty: any)
    straggler: str = ""                 # the slow node (straggler cascades only)
    fails: bool = True                  # False: nothing pages (straggler)


@dataclass(frozen=True)
class Cascade:
    kind: str
    layout: Layout
    release: str
    skew: dict[str, float]
    lines: tuple[Line, ...]
    expected: Expected
    fault_at: float

    @property
    def first_fault_written(self) -> float:
        """When the first error-level line reached a file (the page latency starts there)."""
        return min(line.written for line in self.lines if line.fault)

    @property
    def end(self) -> float:
        return max(line.written for line in self.lines)

    def by_write_time(self) -> list[Line]:
        return sorted(self.lines, key=lambda x: (x.written, x.node, x.file))

    def files(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for line in self.lines:
            out.setdefault(line.node, set()).add(line.file)
        return out


# -- rendering on a node's clock ----------------------------------------------------------------


def _iso(t: float) -> str:
    """journalctl -o short-iso-precise (UTC)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def _glog(level: str, t: float, tid: int, where: str, *, nanos: bool = True) -> str:
    """A glog/c10 prefix as PyTorch prints it: local time, no year."""
    lt = time.localtime(t)
    frac = f"{t % 1:.9f}"[2:] if nanos else f"{t % 1:.6f}"[2:]
    return f"{level}{lt.tm_mon:02d}{lt.tm_mday:02d} {time.strftime('%H:%M:%S', lt)}.{frac} {tid} {where}]"


def _kernel(node: str, t: float, message: str) -> str:
    return f"{_iso(t)} {node} kernel: {message}"


@dataclass
class _Builder:
    layout: Layout
    release: str
    skew: dict[str, float]
    rng: random.Random
    prefixed: bool
    lines: list[Line] = field(default_factory=list)

    def add(self, node: str, file: str, happened: float, text: str, *,
            written: float | None = None, fault: bool = False) -> None:
        self.lines.append(Line(node, file, happened, happened if written is None else written,
                               text, fault))

    def clock(self, node: str, t: float) -> float:
        return t + self.skew[node]

    def pid(self, rank: int) -> int:
        return 2100 + rank % self.layout.ranks_per_node + 17 * (rank // self.layout.ranks_per_node)

    def rank_line(self, rank: int, happened: float, text: str, *, written: float | None = None,
                  fault: bool = False) -> None:
        prefix = f"[rank{rank}]:" if self.prefixed else ""
        sep = " " if prefix and not text.startswith("[") else ""
        self.add(self.layout.node_of(rank), self.layout.rank_file(rank), happened,
                 f"{prefix}{sep}{text}", written=written, fault=fault)

    def c10(self, rank: int, happened: float, level: str, where: str, message: str, *,
            fault: bool = False, written: float | None = None) -> None:
        """A c10 log line: glog-stamped from 2.4, "[E ProcessGroupNCCL.cpp:N]" before."""
        node = self.layout.node_of(rank)
        if self.release in ("2.4", "2.6"):
            head = "[" + _glog(level, self.clock(node, happened), self.pid(rank) + 40, where)
        else:
            head = f"[{level} {where}]"
        self.rank_line(rank, happened, f"{head} {message}", written=written, fault=fault)

    def pg(self, rank: int) -> str:
        if self.release == "2.6":
            return f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
        if self.release == "2.4":
            return f"[PG 0 Rank {rank}]"
        return f"[Rank {rank}]"

    def launcher(self, node: str, happened: float, level: str, where: str, message: str,
                 *, fault: bool = False) -> None:
        t = self.clock(node, happened)
        head = _glog(level, t, 1051, where, nanos=False)
        self.add(node, self.layout.launcher_file(), happened, f"{head} {message}", fault=fault)

    def launcher_raw(self, node: str, happened: float, text: str) -> None:
        self.add(node, self.layout.launcher_file(), happened, text)

    def kernel(self, node: str, happened: float, message: str, *, written: float | None = None,
               fault: bool = False) -> None:
        self.add(node, KERNEL_FILE, happened, _kernel(node, self.clock(node, happened), message),
                 written=written, fault=fault)


# -- steady training --------------------------------------------------------------------------


def _step_line(step: int, seconds: float, loss: float) -> str:
    return (f"step {step:>6d} | loss {loss:.4f} | grad_norm {0.9 + loss / 30:.4f} |"
            f" step_time {seconds:.3f}s")


def steady(b: _Builder, start: float, end: float, first_step: int, *,
           slow: dict[str, float] | None = None, base: float = STEP_SECONDS) -> dict[int, int]:
    """Every rank prints its steps from ``start`` to ``end``; returns each rank's last step."""
    last: dict[int, int] = {}
    for rank in range(b.layout.world):
        node = b.layout.node_of(rank)
        factor = (slow or {}).get(node, 1.0)
        t = start + b.rng.uniform(0, base * factor)
        step = first_step
        while t < end:
            seconds = base * factor * (1 + b.rng.gauss(0, 0.03))
            b.rank_line(rank, t, _step_line(step, seconds, 3.0 - step * 1e-4))
            last[rank] = step
            step += 1
            t += seconds
    return last


def _startup(b: _Builder, at: float) -> None:
    """NCCL's and torchrun's start-up chatter (benign)."""
    for node in b.layout.nodes:
        b.launcher(node, at, "I", "torch/distributed/elastic/agent/server/api.py:879",
                   "[default] starting workers for entrypoint: python3")
        host_ip = 10 + b.layout.nodes.index(node)
        for rank in b.layout.ranks_of(node):
            local = rank % b.layout.ranks_per_node
            b.rank_line(rank, at + 0.5,
                        f"{node}:{b.pid(rank)}:{b.pid(rank)} [{local}] NCCL INFO NCCL_IB_HCA set"
                        f" to mlx5_{local}")
            b.rank_line(rank, at + 0.6,
                        f"{node}:{b.pid(rank)}:{b.pid(rank)} [{local}] NCCL INFO Bootstrap :"
                        f" Using ib0:10.0.0.{host_ip}<0>")


def _noise(b: _Builder, start: float, end: float, *, node_warning_p: float) -> None:
    """Benign lines, and sometimes a node-owned warning unrelated to the job (corrected ECC)."""
    for node in b.layout.nodes:
        if b.rng.random() < 0.3:
            b.kernel(node, b.rng.uniform(start, end),
                     "IPv6: ADDRCONF(NETDEV_CHANGE): ib1: link becomes ready")
        if b.rng.random() < node_warning_p:
            b.kernel(node, b.rng.uniform(start, end),
                     "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_MC#0_Chan#1_DIMM#0"
                     " (channel:1 slot:0 page:0x3f2a1 offset:0x0 grain:32 syndrome:0x0)")
    rank = b.rng.randrange(b.layout.world)
    b.rank_line(rank, b.rng.uniform(start, end),
                "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py:557:"
                " UserWarning: This DataLoader will create 16 worker processes in total. Our"
                " suggested max number of worker in current system is 12, which is smaller"
                " than what this DataLoader is going to create.")


# -- the collateral: watchdog timeouts, aborts, torchrun -----------------------------------------


def _timeout(b: _Builder, rank: int, at: float, seq: int, timeout_s: float) -> None:
    """A rank's NCCL watchdog timeout in ``b.release``'s wording, then its abort."""
    ms = int(timeout_s * 1000)
    ran = ms + b.rng.randint(5, 900)
    work = (f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144,"
            f" Timeout(ms)={ms})" if b.release != "1.13" else
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, Timeout(ms)={ms})")
    caught = f"{b.pg(rank)} Watchdog caught collective operation timeout: {work} ran for {ran}" \
             " milliseconds before timing out."
    where = {"1.13": "ProcessGroupNCCL.cpp:821", "2.1": "ProcessGroupNCCL.cpp:475",
             "2.2": "ProcessGroupNCCL.cpp:523", "2.4": "ProcessGroupNCCL.cpp:607",
             "2.6": "ProcessGroupNCCL.cpp:632"}[b.release]
    b.c10(rank, at, "E", where, caught, fault=True)
    t = at + 0.001
    if b.release in ("2.4", "2.6"):
        b.c10(rank, t, "E", "ProcessGroupNCCL.cpp:1664",
              f"{b.pg(rank)} Exception (either an error or timeout) detected by watchdog at work:"
              f" {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}.")
    if b.release in ("2.2", "2.4", "2.6"):
        b.c10(rank, t, "E", "ProcessGroupNCCL.cpp:1182" if b.release == "2.2" else
              "ProcessGroupNCCL.cpp:1682",
              f"{b.pg(rank)} Timeout at NCCL work: {seq}, last enqueued NCCL work: {seq}, last"
              f" completed NCCL work: {seq - 1}.")
    pre = f"{b.pg(rank)} " if b.release in ("2.4", "2.6") else ""
    b.c10(rank, t, "E", "ProcessGroupNCCL.cpp:577",
          f"{pre}Some NCCL operations have failed or timed out. Due to the asynchronous nature"
          " of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.")
    b.c10(rank, t, "E", "ProcessGroupNCCL.cpp:583",
          f"{pre}To avoid data inconsistency, we are taking the entire process down.")
    thread = "Process group watchdog thread" if b.release in ("2.4", "2.6") else \
        "NCCL watchdog thread"
    b.c10(rank, t + 0.002, "E", "ProcessGroupNCCL.cpp:1418",
          f"{b.pg(rank)} {thread} terminated with exception: {caught}")
    b.rank_line(rank, t + 0.003, "terminate called after throwing an instance of"
                " 'c10::DistBackendError'")
    b.rank_line(rank, t + 0.003, f"  what():  {b.pg(rank)} {thread} terminated with exception:"
                f" {caught}")


def _stuck_rank_figures(b: _Builder, rank: int, at: float, seq: int, timed_out: int) -> None:
    """What a rank that never entered collective ``seq`` prints on the others' dump signal."""
    if b.release == "2.4":
        b.c10(rank, at, "E", "ProcessGroupNCCL.cpp:1292",
              f"{b.pg(rank)} Received a global timeout from another rank and will start to dump"
              f" the debug info. Last enqueued NCCL work: {seq - 1}, last completed NCCL work:"
              f" {seq - 1}.")
    elif b.release == "2.6":
        b.c10(rank, at, "E", "ProcessGroupNCCL.cpp:1922",
              f"{b.pg(rank)} Observed flight recorder dump signal from another rank via"
              " TCPStore.")
        b.c10(rank, at + 0.0002, "E", "ProcessGroupNCCL.cpp:1987",
              f"{b.pg(rank)} Received a dump signal due to a collective timeout from  rank"
              f" {timed_out} and we will try our best to dump the debug info. Last enqueued NCCL"
              f" work: {seq - 1}, last completed NCCL work: {seq - 1}.This is most likely"
              " caused by incorrect usages of collectives, e.g., wrong sizes used across"
              " ranks, the order of collectives is not same for all ranks or the scheduled"
              " collective, for some reason, didn't run. Additionally, this can be caused by"
              " GIL deadlock or other reasons such as network errors or bugs in the"
              " communications library (e.g. NCCL), etc. ")


def _torchrun_failure(b: _Builder, node: str, at: float, failed: dict[int, int]) -> None:
    """The agent on ``node`` after its workers died: SIGTERM fan-out, ChildFailedError.

    ``failed``: local worker rank -> exit code (negative: the signal) of the first failures;
    the node's other workers get SIGTERM.
    """
    ranks = list(b.layout.ranks_of(node))
    first = min(failed, key=lambda r: (failed[r] == -15, r))
    for rank in ranks:
        if rank not in failed:
            b.launcher(node, at, "W", "torch/distributed/elastic/multiprocessing/api.py:897",
                       f"Sending process {b.pid(rank)} closing signal SIGTERM")
    code = failed[first]
    b.launcher(node, at + 0.4, "E", "torch/distributed/elastic/multiprocessing/api.py:869",
               f"failed (exitcode: {code}) local_rank: {first % b.layout.ranks_per_node} (pid:"
               f" {b.pid(first)}) of binary: {_PYTHON}", fault=code != -15)
    t = at + 0.5
    for text in ("Traceback (most recent call last):",
                 '  File "/usr/local/bin/torchrun", line 8, in <module>',
                 "    sys.exit(main())",
                 '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py",'
                 " line 263, in launch_agent",
                 "    raise ChildFailedError(",
                 "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                 "============================================================",
                 f"{_PROGRAM} FAILED",
                 "------------------------------------------------------------",
                 "Failures:"):
        b.launcher_raw(node, t, text)
    stamp = time.strftime("%Y-%m-%d_%H:%M:%S", time.localtime(b.clock(node, at)))
    others = [r for r in ranks if r != first]
    if not others:
        b.launcher_raw(node, t, "  <NO_OTHER_FAILURES>")
    for i, rank in enumerate(others, 1):
        _failure_entry(b, node, t, i, rank, failed.get(rank, -15), stamp)
    b.launcher_raw(node, t, "------------------------------------------------------------")
    b.launcher_raw(node, t, "Root Cause (first observed failure):")
    _failure_entry(b, node, t, 0, first, code, stamp)
    b.launcher_raw(node, t, "============================================================")


def _failure_entry(b: _Builder, node: str, t: float, index: int, rank: int, code: int,
                   stamp: str) -> None:
    signals = {-6: "SIGABRT", -15: "SIGTERM", -9: "SIGKILL"}
    b.launcher_raw(node, t, f"[{index}]:")
    b.launcher_raw(node, t, f"  time      : {stamp}")
    b.launcher_raw(node, t, f"  host      : {node}")
    b.launcher_raw(node, t, f"  rank      : {rank} (local_rank: {rank % b.layout.ranks_per_node})")
    if code < 0:
        b.launcher_raw(node, t, f"  exitcode  : {code} (pid: {b.pid(rank)})")
        b.launcher_raw(node, t, "  error_file: <N/A>")
        b.launcher_raw(node, t, f"  traceback : Signal {-code} ({signals[code]}) received by PID"
                                f" {b.pid(rank)}")
    else:
        b.launcher_raw(node, t, f"  exitcode  : {code} (pid: {b.pid(rank)})")
        b.launcher_raw(node, t, "  error_file: <N/A>")
        b.launcher_raw(node, t, "  traceback : To enable traceback see:"
                                " https://pytorch.org/docs/stable/elastic/errors.html")


def _collateral(b: _Builder, at: float, seq: int, timeout_s: float, *,
                skip: Iterable[int] = (), first_failed: dict[int, int] | None = None) -> float:
    """Every rank not in ``skip`` times out at ``at`` (+ jitter); torchrun on every node.

    Returns when the last agent finished. ``first_failed`` are failures (rank -> exit code)
    known before the timeouts (the root fault's own ranks).
    """
    skipped = set(skip)
    failed: dict[str, dict[int, int]] = {n: {} for n in b.layout.nodes}
    first_exit: dict[str, float] = {}
    for rank, code in (first_failed or {}).items():
        node = b.layout.node_of(rank)
        failed[node][rank] = code
        first_exit[node] = at - timeout_s + 1.0
        skipped.update(b.layout.ranks_of(node))  # its agent stopped the node's other workers
    for rank in range(b.layout.world):
        if rank in skipped:
            continue
        node = b.layout.node_of(rank)
        t = at + b.rng.uniform(0.0, 0.6)
        _timeout(b, rank, t, seq, timeout_s)
        failed[node][rank] = -6
        first_exit[node] = min(first_exit.get(node, t + 0.1), t + 0.1)
    end = at
    for node in b.layout.nodes:
        if not failed[node]:
            continue
        when = first_exit[node] + b.rng.uniform(0.2, 1.5)
        _torchrun_failure(b, node, when, failed[node])
        end = max(end, when + 1)
    return end


# -- root faults ----------------------------------------------------------------------------


def _xid79(b: _Builder, node: str, at: float, late: float, timeout_s: float, seq: int) -> None:
    """A GPU of ``node`` falls off the bus at ``at``. With ``late``, the kernel lines reach their
    file that many seconds after the job's first other error line (a node's ranks failing on
    CUDA, or the others' timeouts), stamped with their own, earlier, time."""
    # The node's own ranks: some fail on CUDA at once, the others hang with their GPU peers.
    failed: dict[int, int] = {}
    for rank in b.layout.ranks_of(node):
        if b.rng.random() < 0.5:
            t = at + b.rng.uniform(0.2, 3.0)
            b.c10(rank, t, "E", "ProcessGroupNCCL.cpp:1895",
                  f"{b.pg(rank)} Process group watchdog thread terminated with exception: CUDA"
                  " error: unspecified launch failure", fault=True)
            b.rank_line(rank, t + 0.001, "terminate called after throwing an instance of"
                        " 'c10::DistBackendError'")
            failed[rank] = -6
    _collateral(b, at + timeout_s, seq, timeout_s, skip=b.layout.ranks_of(node),
                first_failed=failed)
    if not failed:  # the agent of the hung node sees its workers only at the end
        _torchrun_failure(b, node, at + timeout_s + 2.0,
                          dict.fromkeys(b.layout.ranks_of(node), -15) |
                          {b.layout.ranks_of(node)[0]: -9})
    first_other = min(x.written for x in b.lines if x.fault and x.happened >= at)
    written = first_other + late if late else None
    bus = b.rng.choice(["0000:1b:00", "0000:43:00", "0000:52:00", "0000:9d:00", "0000:c3:00"])
    kernel = (
        f"NVRM: GPU at PCI:{bus}: GPU-{b.rng.getrandbits(32):08x}-7a1c-4d2e-9f3b-"
        f"{b.rng.getrandbits(48):012x}",
        "NVRM: GPU Board Serial Number: 1652823054321",
        f"NVRM: Xid (PCI:{bus}): 79, pid=0, GPU has fallen off the bus.",
        f"NVRM: GPU {bus}.0: GPU has fallen off the bus.",
        f"NVRM: GPU {bus}.0: A GPU crash dump has been created. If possible, please run",
        "NVRM: nvidia-bug-report.sh as root to collect this data before",
        "NVRM: the NVIDIA kernel module is unloaded.")
    for i, text in enumerate(kernel):
        offset = i * 1e-4
        b.kernel(node, at + offset, text, written=None if written is None else written + offset,
                 fault="fallen off the bus" in text)


def _laggard(b: _Builder, rank: int, at: float, timeout_s: float, seq: int) -> None:
    """``rank`` stops at ``at`` (stuck in its data loader); the others time out on ``seq``."""
    node = b.layout.node_of(rank)
    timed_out = next(r for r in range(b.layout.world) if r != rank)
    _stuck_rank_figures(b, rank, at + timeout_s + b.rng.uniform(0.8, 2.0), seq, timed_out)
    _collateral(b, at + timeout_s, seq, timeout_s, skip=[rank])
    del node


def _ib_port(b: _Builder, node: str, at: float, timeout_s: float, seq: int) -> None:
    pci = b.rng.choice(["0000:0c:00.0", "0000:3b:00.1", "0000:5e:00.0"])
    event = b.rng.choice(["Port module event: module 0, Cable unplugged",
                          "Port module event[error]: module 0, Cable error, Bad or shorted"
                          " cable/module"])
    b.kernel(node, at, f"mlx5_core {pci}: {event}")
    hosts = {n: f"10.0.0.{10 + i}" for i, n in enumerate(b.layout.nodes)}
    neighbour = b.layout.nodes[(b.layout.nodes.index(node) + 1) % len(b.layout.nodes)]
    for rank in b.layout.ranks_of(node):
        local = rank % b.layout.ranks_per_node
        t = at + b.rng.uniform(0.05, 0.4)
        b.rank_line(rank, t, f"{node}:{b.pid(rank)}:{b.pid(rank) + 312} [{local}] NCCL WARN NET/IB"
                    f" : mlx5_{local}:1 Got async event : port error")
        b.rank_line(rank, t + b.rng.uniform(0.3, 1.5),
                    f"{node}:{b.pid(rank)}:{b.pid(rank) + 313} [{local}] transport/net_ib.cc:1696"
                    f" NCCL WARN NET/IB : Got completion from peer {hosts[neighbour]}<{40000 + rank}>"
                    f" with status=5 opcode=0 len=0 vendor err 249 (Send) localGid ::ffff:"
                    f"{hosts[node]} remoteGids::ffff:{hosts[neighbour]}", fault=True)
    # The peers that send to node N give up after the IB retries (NCCL_IB_TIMEOUT, retry count).
    retry = b.rng.uniform(6.0, 30.0)
    previous = b.layout.nodes[(b.layout.nodes.index(node) - 1) % len(b.layout.nodes)]
    for rank in b.layout.ranks_of(previous):
        local = rank % b.layout.ranks_per_node
        b.rank_line(rank, at + retry + b.rng.uniform(0, 0.5),
                    f"{previous}:{b.pid(rank)}:{b.pid(rank) + 313} [{local}] transport/net_ib.cc:"
                    f"1696 NCCL WARN NET/IB : Got completion from peer {hosts[node]}<{41000 + rank}>"
                    f" with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:"
                    f"{hosts[previous]} remoteGids::ffff:{hosts[node]}", fault=True)
    _collateral(b, at + max(timeout_s, retry + 1), seq, timeout_s)


_EXCEPTIONS = (
    ('  File "/workspace/llm/data.py", line 141, in __getitem__',
     "    return {\"input_ids\": sample[\"input_ids\"], \"labels\": sample[\"labels\"]}",
     "KeyError: 'labels'"),
    ('  File "/workspace/llm/model.py", line 77, in forward',
     "    assert t <= self.max_seq_len, f\"sequence length {t} exceeds {self.max_seq_len}\"",
     "AssertionError: sequence length 4097 exceeds 4096"),
    ('  File "/workspace/llm/loss.py", line 32, in forward',
     "    raise ValueError(f\"Expected input batch_size ({b}) to match target batch_size ({tb}).\")",
     "ValueError: Expected input batch_size (64) to match target batch_size (32)."),
    ('  File "/workspace/llm/tokenizer.py", line 58, in encode',
     "    return [self.vocab[t] for t in tokens]",
     "IndexError: index 50304 is out of bounds for dimension 0 with size 50257"),
)


def _traceback(b: _Builder, rank: int, at: float, exception: tuple[str, str, str]) -> None:
    frames = ["Traceback (most recent call last):",
              f'  File "{_PROGRAM}", line 412, in <module>',
              "    main()",
              f'  File "{_PROGRAM}", line 377, in main',
              "    loss = train_step(model, batch)",
              *exception]
    for i, text in enumerate(frames):
        b.rank_line(rank, at + i * 0.0001, text, fault=i == len(frames) - 1)


def _user_all(b: _Builder, at: float) -> None:
    exception = b.rng.choice(_EXCEPTIONS)
    for rank in range(b.layout.world):
        _traceback(b, rank, at + b.rng.uniform(0.0, 1.0), exception)
    for node in b.layout.nodes:
        _torchrun_failure(b, node, at + b.rng.uniform(1.5, 3.0),
                          dict.fromkeys(b.layout.ranks_of(node), 1))


def _user_one(b: _Builder, rank: int, at: float, timeout_s: float, seq: int) -> None:
    _traceback(b, rank, at, b.rng.choice(_EXCEPTIONS))
    node = b.layout.node_of(rank)
    _collateral(b, at + timeout_s, seq, timeout_s, skip=[rank], first_failed={rank: 1})
    del node


# -- the cascades -----------------------------------------------------------------------------


def generate(kind: str, layout: Layout, rng: random.Random, *, start: float,
             culprit: int = 0, release: str = "2.6", timeout: float = 6.0,
             late: float = 0.0, lead: float = 4.0, skew: dict[str, float] | None = None,
             prefixed: bool | None = None, node_warning_p: float = 0.0,
             slowdown: float = 1.4, straggler_seconds: float = 90.0) -> Cascade:
    """One cascade of ``kind`` in ``layout``, training from ``start``, the fault ``lead`` later.

    ``culprit``: the index of the culprit node (xid79, ib_port, straggler) or the culprit
    rank (laggard, user_one). ``timeout``: seconds from the fault to the others' watchdog
    timeouts. ``late``: the xid79 kernel lines are written that many seconds after the job's
    first other error line. ``skew``: each node's clock offset (default: random within +-2 s).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown cascade kind {kind!r}")
    if release not in RELEASES:
        raise ValueError(f"unknown release {release!r}")
    skew = skew if skew is not None else {
        n: rng.uniform(-MAX_SKEW, MAX_SKEW) for n in layout.nodes}
    prefixed = release not in ("1.13", "2.1") if prefixed is None else prefixed
    b = _Builder(layout, release, skew, rng, prefixed)
    fault_at = start + lead
    seq = rng.randint(2_000, 90_000)
    _startup(b, start - 1.0)
    node = layout.nodes[culprit % len(layout.nodes)]
    rank = culprit % layout.world
    _noise(b, start, start + straggler_seconds if kind == "straggler" else fault_at + timeout + 10,
           node_warning_p=node_warning_p)
    if kind == "straggler":
        steady(b, start, start + straggler_seconds, 1, slow={node: slowdown})
        expected = Expected("", "", frozenset(), frozenset(), straggler=node, fails=False)
        return Cascade(kind, layout, release, skew, tuple(b.lines), expected, start)
    steady(b, start, fault_at, 1)
    if kind == "xid79":
        _xid79(b, node, fault_at, late, timeout, seq)
        expected = Expected("node", node, frozenset({""} | {str(r) for r in layout.ranks_of(node)}),
                            frozenset({"nvidia_xid_79_fallen_off_bus",
                                       "nvidia_gpu_fallen_off_bus"}))
    elif kind == "laggard":
        _laggard(b, rank, fault_at, timeout, seq)
        expected = Expected("unknown", layout.node_of(rank), frozenset({str(rank)}), frozenset())
    elif kind == "ib_port":
        _ib_port(b, node, fault_at, timeout, seq)
        expected = Expected("fabric", node,
                            frozenset({""} | {str(r) for r in layout.ranks_of(node)}),
                            frozenset())
    elif kind == "user_all":
        _user_all(b, fault_at)
        expected = Expected("user", "", frozenset({""}), frozenset())
    else:  # user_one
        _user_one(b, rank, fault_at, timeout, seq)
        expected = Expected("user", "", frozenset({""}), frozenset())
    return Cascade(kind, layout, release, skew, tuple(b.lines), expected, fault_at)


def random_cascade(rng: random.Random, *, start: float, job: str,
                   node_names: Sequence[str], kinds: Sequence[str] = KINDS[:5]) -> Cascade:
    """A random cascade: kind, nodes, culprit, timing, lateness, skew, noise, wording."""
    count = rng.choice([4, 6, 8, 12, 16])
    count = min(count, len(node_names))
    layout = Layout(job, tuple(node_names[:count]), rng.choice([4, 8]))
    kind = rng.choice(list(kinds))
    culprit = (rng.randrange(layout.world) if kind in ("laggard", "user_one")
               else rng.randrange(count))
    release = rng.choice(RELEASES)
    if kind == "laggard" and release in ("1.13", "2.1", "2.2"):
        release = rng.choice(["2.4", "2.6"])  # older releases print no figures for the stuck rank
    return generate(kind, layout, rng, start=start, culprit=culprit, release=release,
                    timeout=rng.choice([8.0, 15.0, 30.0, 60.0, 120.0, 600.0]),
                    late=rng.choice([0.0, 0.0, rng.uniform(0.5, 12.0)]) if kind == "xid79" else 0.0,
                    lead=rng.uniform(3.0, 20.0), node_warning_p=0.05,
                    prefixed=rng.random() < 0.5 if release not in ("1.13", "2.1") else False)


# -- writing into per-node log folders ------------------------------------------------------------


class CascadeWriter:
    """Writes cascades into ``roots[node]``: ``jobs/<job>/rank<r>.log``, ``jobs/<job>/launcher.log``
    (torchrun's agent) and ``kernel/kern.log`` (the kernel log, as journalctl writes it).

    ``write_until(t)`` appends every line whose write time is at most ``t`` (true time), in
    order, grouped per file; the test paces it with the real clock, the scorer with its own.
    """

    def __init__(self, roots: dict[str, Path]) -> None:
        self.roots = roots
        self._pending: list[Line] = []

    def add(self, cascade: Cascade | Iterable[Line]) -> None:
        lines = cascade.lines if isinstance(cascade, Cascade) else tuple(cascade)
        self._pending = sorted([*self._pending, *lines],
                               key=lambda x: (x.written, x.node, x.file))

    @property
    def next_time(self) -> float | None:
        return self._pending[0].written if self._pending else None

    def drop(self, job: str) -> int:
        """Forget the job's lines not written yet (the job was stopped); returns how many."""
        kept = [x for x in self._pending if f"/{job}/" not in f"/{x.file}"]
        dropped = len(self._pending) - len(kept)
        self._pending = kept
        return dropped

    def write_until(self, t: float) -> int:
        """Append every pending line written at or before ``t``; returns how many."""
        cut = 0
        while cut < len(self._pending) and self._pending[cut].written <= t:
            cut += 1
        batch, self._pending = self._pending[:cut], self._pending[cut:]
        grouped: dict[Path, list[str]] = {}
        for line in batch:
            path = self.roots[line.node] / line.file
            grouped.setdefault(path, []).append(line.text + "\n")
        for path, texts in grouped.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as fh:
                fh.write("".join(texts))
        return len(batch)
