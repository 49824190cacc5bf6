#!/usr/bin/env python3
"""Speed and memory of sigwatch next to mtail and ``grep -E -f``, in one run, as ratios.

Not a test: it prints a table and the ratios the issue asks for, and writes results.json.

    make bench                      # 256 MB corpus, everything
    .venv/bin/python bench/run_bench.py --size-mb 64 --skip-daemon   # quicker

Batch: one deterministic generated training log (bench/corpus.py), scanned by
- ``sigwatch scan`` with 40 library signatures, default install (pure-Python prefilter);
- the same with the optional Hyperscan prefilter, when ``hyperscan`` is importable;
- ``sigwatch scan`` with 400 signatures (the library plus generated ones, see below);
- mtail (Debian package ``mtail``, installed with apt-get if missing) running an .mtail program
  generated from the same 40 signatures' regexes, one counter per step, ``--one_shot``;
- ``grep -E -c -f`` (LC_ALL=C) with the same 40 regexes translated to POSIX ERE.
Each is run ``--repeat`` times; the fastest wall time is kept. CPU seconds and peak RSS come
from ``wait4()`` of that process.

Daemon as shipped (``sigwatch run``, the full library, every detector; ``--skip-catchup``
skips it): catch-up of the corpus as a backlog (MB/s per core, peak RSS) and CPU while the log
grows at 1 MB/s. Scan of the full library with the detectors (``scan``'s default) and with
``--no-detectors``, and their ratio; and with the detectors but ``--no-generic`` (the generic
layer off), and that ratio.

Daemon (``sigwatch run``, 40 signatures, pure-Python prefilter):
- latency: append a failure line to a watched file, time until it is in the event log and
  until ``sigwatch_detections_total`` counts it on /metrics; p50/p99 over ``--probes`` appends;
- idle CPU: 1,000 idle watched files, CPU seconds over ``--idle-seconds``; the same with
  10,000 files in one folder, and with 20,000 folders under a mid-path wildcard
  (``root/*/logs/*.out``; ``--only-idle`` runs just those two; target below 1% of a core);
- memory: peak RSS while a 1 GB file is appended and read, and with 10,000 watched files;
- ``sigwatch health``: its answer time (healthy, a fault open, no daemon) beside a bare
  ``python3 -c pass``, ``sigwatch --version`` and a one-shot HTTP GET (bench/health.py;
  ``--only-health`` runs just that).

The 40 signatures: the library's signatures whose regexes RE2 (mtail) accepts unchanged, sorted
by id, 40 taken at even spacing. The 400: the whole library plus generated error-message-shaped
signatures (component x problem x four message shapes, each with its own literals).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))
sys.path.insert(0, str(ROOT / "bench"))

from corpus import generate  # noqa: E402
from health import measure_health  # noqa: E402

from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns  # noqa: E402

PY = sys.executable


# --- signature sets -------------------------------------------------------------------------

_RE2_UNSUPPORTED = re.compile(r"\(\?<[=!]|\(\?[=!]|\(\?>|[*+?}]\+|\\[1-9]|\\[pPXGKZ]|\(\?<\w")


_REPEAT_COUNT = re.compile(r"\{(\d+)(?:,(\d*))?\}")
RE2_MAX_REPEAT = 1000  # RE2 refuses a larger repeat count ("invalid repeat count")
MTAIL_MAX_PATTERN = 1024  # mtail refuses a longer regex ("Exceeded maximum ... pattern length")


def mtail_regex(pattern: str) -> str | None:
    """The regex as an mtail /literal/, or None when RE2 would not take it unchanged."""
    if _RE2_UNSUPPORTED.search(pattern):
        return None
    for m in _REPEAT_COUNT.finditer(pattern):
        if any(g and int(g) > RE2_MAX_REPEAT for g in m.groups()):
            return None
    literal = pattern.replace("/", r"\/")
    if len(literal.encode()) > MTAIL_MAX_PATTERN:
        return None
    return literal


def pick_40(patterns) -> list:
    usable = [s for s in patterns.signatures
              if all(mtail_regex(st.source) is not None for st in s.steps)]
    usable.sort(key=lambda s: s.id)
    if len(usable) <= 40:
        return usable
    step = len(usable) / 40
    return [usable[int(k * step)] for k in range(40)]


COMPONENTS = ["Dataloader", "Checkpoint", "Optimizer", "Scheduler", "Tokenizer", "Collective",
              "Allocator", "Profiler", "Compiler", "Kernel", "Stream", "Graph", "Shard",
              "Pipeline", "Rendezvous", "Storage", "Network", "Driver", "Firmware", "Runtime",
              "Sampler", "Evaluator", "Exporter", "Launcher", "Watchdog"]
PROBLEMS = ["timeout", "corruption", "mismatch", "overflow", "underflow", "deadlock",
            "exhausted", "unreachable", "invalid state", "checksum error", "version skew",
            "lost heartbeat", "stale handle", "double free", "quota exceeded", "bad magic"]


def synthetic_signatures(count: int) -> list[tuple[str, str]]:
    """``count`` (id, regex) pairs shaped like real error messages, each with its own literals."""
    rng = random.Random(400)
    combos = [(c, p, k) for c in COMPONENTS for p in PROBLEMS for k in range(4)]
    rng.shuffle(combos)
    out = []
    for n, (comp, prob, shape) in enumerate(combos[:count]):
        snake = prob.replace(" ", "_")
        if shape == 0:
            rx = (rf"{comp}Error: {prob} in (?P<where>[\w./-]{{1,80}}) "
                  rf"\(code (?P<code>\d{{1,5}})\)")
        elif shape == 1:
            rx = rf"\b{comp.upper()}_{snake.upper()}_E{n:03d}\b"
        elif shape == 2:
            rx = (rf"{comp.lower()} {prob} detected on rank (?P<rank>\d{{1,5}}) "
                  rf"after \d{{1,3}} retries")
        else:
            rx = (rf"E\d{{4}} \d\d:\d\d:\d\d\.\d{{1,6}} +\d{{1,7}} {comp.lower()}_{snake}\.cc:"
                  rf"\d{{1,5}}\] {comp} {prob}")
        out.append((f"synthetic_{n:03d}_{comp.lower()}_{snake}", rx))
    return out


def write_sets(patterns, work: Path) -> tuple[Path, Path, list]:
    sig40 = pick_40(patterns)
    p40 = work / "patterns40"
    p400 = work / "patterns400"
    for d in (p40, p400):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    for sig in sig40:  # without cross-references to signatures left out
        (p40 / sig.path.name).write_text(standalone_toml(sig), encoding="utf-8")
    for sig in patterns.signatures:
        shutil.copy(sig.path, p400 / sig.path.name)
    for sig_id, rx in synthetic_signatures(400 - len(patterns.signatures)):
        (p400 / f"{sig_id}.toml").write_text(
            f"id = '{sig_id}'\ntitle = 'Synthetic {sig_id}'\nseverity = 'error'\n"
            f"[match]\nregex = '''{rx}'''\n", encoding="utf-8")
    return p40, p400, sig40


def _lit(text: str) -> str:
    return "'''" + text + "'''"


def standalone_toml(sig) -> str:
    """The signature's matching part (steps, windows, context) as a file of its own."""
    raw = sig.raw
    out = [f"id = '{sig.id}'", f"title = {_lit(raw.title)}", f"severity = '{raw.severity}'",
           "[match]", f"regex = {_lit(raw.match.regex)}"]
    for step in raw.match.then:
        out += ["[[match.then]]", f"regex = {_lit(step.regex)}",
                f"within_lines = {step.within_lines}"]
    if raw.context.before or raw.context.include:
        inc = ", ".join(_lit(x) for x in raw.context.include)
        out += ["[context]", f"before = {raw.context.before}", f"include = [{inc}]"]
    return "\n".join(out) + "\n"


def mtail_program(sigs) -> str:
    lines = []
    for sig in sigs:
        for k, step in enumerate(sig.steps):
            name = f"sig_{sig.id}_{k}"
            lines.append(f"counter {name}\n/{mtail_regex(step.source)}/ {{\n  {name}++\n}}\n")
    return "\n".join(lines)


def ere(pattern: str) -> str:
    """A best-effort POSIX ERE of a Python regex, for grep (speed reference only)."""
    p = re.sub(r"\(\?P<\w+>", "(", pattern)
    p = p.replace("(?:", "(")
    p = re.sub(r"\(\?i\)", "", p)
    p = p.replace(r"\d", "[0-9]").replace(r"[^\n]", ".").replace(r"\n", "")
    p = re.sub(r"([*+?}])\?", r"\1", p)  # lazy -> greedy
    return p


# --- processes --------------------------------------------------------------------------------

@dataclass
class Run:
    name: str
    wall: float
    cpu: float
    rss_mb: float
    lines: int
    size: int
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def lines_s(self) -> float:
        return self.lines / self.wall

    @property
    def mb_s(self) -> float:
        return self.size / self.wall / 1e6


TIME = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)


def timed(cmd: list[str], *, env: dict | None = None, stdout=subprocess.DEVNULL,
          ) -> tuple[float, float, float, int]:
    """Wall, CPU seconds, peak RSS (MB) and exit status of ``cmd``.

    Through GNU time when present: a child forked from this (large) Python process would
    report this process's RSS as its own peak; GNU time's child is forked from GNU time.
    """
    report = None
    if TIME is not None:
        fd, name = tempfile.mkstemp(prefix="bench-time-")
        os.close(fd)
        report = Path(name)
        cmd = [TIME, "-q", "-f", "%e %U %S %M %x", "-o", str(report), *cmd]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=subprocess.DEVNULL)
    _pid, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    if report is not None:
        text = report.read_text().split()
        report.unlink()
        if len(text) >= 5:
            _e, user, sys_, rss_kb, code = text[-5:]
            return wall, float(user) + float(sys_), int(rss_kb) / 1024, int(code)
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, rc


def best_of(name: str, cmd: list[str], repeat: int, lines: int, size: int, *,
            env: dict | None = None, out: Path | None = None, ok=(0, 1)) -> Run:
    best: Run | None = None
    for _ in range(repeat):
        fh = out.open("wb") if out else subprocess.DEVNULL
        try:
            wall, cpu, rss, rc = timed(cmd, env=env, stdout=fh)
        finally:
            if out:
                fh.close()
        if rc not in ok:
            raise SystemExit(f"{name}: exit status {rc}: {' '.join(cmd)}")
        if best is None or wall < best.wall:
            best = Run(name, wall, cpu, rss, lines, size)
    assert best is not None
    return best


def ensure_mtail() -> str | None:
    found = shutil.which("mtail")
    if found:
        return found
    print("mtail not found: installing the Debian package with apt-get", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "mtail"]):
        if subprocess.run(cmd, env=env, check=False).returncode != 0:
            return None
    return shutil.which("mtail")


def sigwatch_env(backend: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "daemon"), SIGWATCH_PREFILTER=backend)
    return env


def hyperscan_importable() -> bool:
    try:
        import hyperscan  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


# --- daemon measurements ----------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, work: Path, watch: str, patterns: Path | None, name: str,
                 start_at: str = "end") -> None:
        self.dir = work / name
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.events = self.dir / "events.jsonl"
        self.port = free_port()
        # patterns None: the built-in library, as shipped (and every detector, the default)
        self.cmd = [PY, "-m", "sigwatch", "run", "--watch", watch, "--events", str(self.events),
                    "--state-dir", str(self.dir / "state"), "--listen", f"127.0.0.1:{self.port}",
                    *(["--patterns", str(patterns)] if patterns is not None else []),
                    "--start-at", start_at, "--no-console"]
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, env=sigwatch_env("python"),
                                     stdout=subprocess.DEVNULL,
                                     stderr=(self.dir / "stderr.log").open("wb"))
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                self.metrics()
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"daemon did not serve /metrics: see {self.dir / 'stderr.log'}")

    def wait_watching(self, files: int, timeout: float = 300) -> float:
        """Seconds until every file is open (appends before that would count as old data)."""
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            if self.metric_sum("sigwatch_files_watched") >= files:
                return time.perf_counter() - t0
            time.sleep(0.1)
        raise SystemExit(f"daemon watches fewer than {files} files after {timeout} s")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric_sum(self, name: str, text: str | None = None) -> float:
        text = self.metrics() if text is None else text
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self, field: str = "VmRSS") -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _empty_folder(path: Path) -> Path:
    """A fresh, empty folder for one measurement's watched logs."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def measure_latency(work: Path, p40: Path, probes: int) -> dict:
    logs = _empty_folder(work / "lat_logs")
    target = logs / "train.log"
    target.write_bytes(b"start\n")
    d = Daemon(work, str(logs / "*.log"), p40, "daemon_latency")
    d.start()
    try:
        d.wait_watching(1)
        time.sleep(1.0)
        rng = random.Random(1)
        to_event: list[float] = []
        to_metric: list[float] = []
        seen = 0
        base = d.metric_sum("sigwatch_detections_total")
        for k in range(probes):
            with target.open("ab") as fh:
                for _ in range(rng.randrange(20)):  # some ordinary lines around it
                    fh.write(b"[rank0]: {'loss': 2.31, 'grad_norm': 0.93, 'epoch': 0.1}\n")
                t0 = time.perf_counter()
                fh.write(b"[rank3]: RuntimeError: CUDA error: an illegal memory access was "
                         b"encountered (probe %d)\n" % k)
            got_event = got_metric = None
            last_poll = 0.0
            marker = b"(probe %d)" % k
            deadline = t0 + 10
            while (got_event is None or got_metric is None) and time.perf_counter() < deadline:
                if got_event is None and d.events.exists():
                    with d.events.open("rb") as fh:
                        fh.seek(seen)
                        chunk = fh.read()
                    if marker in chunk:
                        got_event = time.perf_counter() - t0
                        seen += chunk.rfind(b"\n") + 1
                now = time.perf_counter()
                if got_metric is None and now - last_poll >= 0.01:  # /metrics costs the daemon
                    last_poll = now
                    if d.metric_sum("sigwatch_detections_total") >= base + k + 1:
                        got_metric = time.perf_counter() - t0
                time.sleep(0.002)
            to_event.append(got_event if got_event is not None else float("inf"))
            to_metric.append(got_metric if got_metric is not None else float("inf"))
            time.sleep(rng.uniform(0.05, 0.25))
    finally:
        d.stop()

    def pct(xs: list[float], q: float) -> float:
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]

    return {"probes": probes,
            "event_p50_ms": pct(to_event, 0.5) * 1e3, "event_p99_ms": pct(to_event, 0.99) * 1e3,
            "metric_p50_ms": pct(to_metric, 0.5) * 1e3,
            "metric_p99_ms": pct(to_metric, 0.99) * 1e3}


def measure_idle(work: Path, p40: Path, files: int, seconds: float) -> dict:
    logs = _empty_folder(work / "idle_logs")
    for k in range(files):
        (logs / f"rank{k:05d}.log").write_bytes(b"step 1 loss 2.0\n" * 3)
    d = Daemon(work, str(logs / "*.log"), p40, "daemon_idle")
    d.start()
    try:
        d.wait_watching(files)
        time.sleep(10.0)  # let start-up settle
        c0, t0 = d.cpu_seconds(), time.perf_counter()
        time.sleep(seconds)
        c1, t1 = d.cpu_seconds(), time.perf_counter()
        watched = d.metric_sum("sigwatch_files_watched")
        rss = d.rss_mb()
    finally:
        d.stop()
    return {"files": files, "seconds": round(t1 - t0, 1),
            "cpu_percent_of_core": (c1 - c0) / (t1 - t0) * 100, "rss_mb": rss,
            "files_watched_metric": watched}


def _idle_cpu(d: Daemon, files: int, settle: float, seconds: float) -> dict:
    """Start ``d``, wait until it follows ``files`` files, then CPU over ``seconds`` idle."""
    d.start()
    try:
        opened = d.wait_watching(files)
        time.sleep(settle)  # start-up work (first reads, first checkpoint) is not idle
        c0, t0 = d.cpu_seconds(), time.perf_counter()
        time.sleep(seconds)
        c1, t1 = d.cpu_seconds(), time.perf_counter()
        text = d.metrics()
        out = {"seconds": round(t1 - t0, 1),
               "cpu_percent_of_core": round((c1 - c0) / (t1 - t0) * 100, 2),
               "rss_mb": round(d.rss_mb(), 1), "seconds_to_follow_all": round(opened, 1),
               "files_watched_metric": d.metric_sum("sigwatch_files_watched", text),
               "watched_directories_metric": d.metric_sum("sigwatch_watched_directories",
                                                          text)}
    finally:
        d.stop()
    return out


def measure_idle_files(work: Path, p40: Path, files: int, seconds: float) -> dict:
    """Idle CPU with ``files`` quiet files in one folder (issue 11: below 1% of a core)."""
    logs = _empty_folder(work / "idle_many")
    for k in range(files):
        (logs / f"rank{k:05d}.log").write_bytes(b"step 1 loss 2.0\n" * 3)
    d = Daemon(work, str(logs / "*.log"), p40, "daemon_idle_many")
    return {"files": files, **_idle_cpu(d, files, 15.0, seconds)}


def measure_idle_tree(work: Path, p40: Path, dirs: int, seconds: float) -> dict:
    """Idle CPU with ``dirs`` directories under a mid-path wildcard (``root/*/logs/*.out``).

    Each job folder holds ``logs/rank0.out`` and checkpoint folders the glob cannot match
    (ten folders per job in all), the shape of a shared scratch file system.
    """
    root = _empty_folder(work / "idle_tree")
    jobs = max(1, dirs // 10)
    for j in range(jobs):
        job = root / f"job{j:05d}"
        (job / "logs").mkdir(parents=True)
        (job / "logs" / "rank0.out").write_bytes(b"step 1 loss 2.0\n")
        (job / "data").mkdir()
        for k in range(7):
            (job / "ckpt" / f"step{k}").mkdir(parents=True)
    made = sum(1 for _ in root.rglob("*") if _.is_dir())
    d = Daemon(work, str(root / "*" / "logs" / "*.out"), p40, "daemon_idle_tree")
    return {"directories": made, "files": jobs, **_idle_cpu(d, jobs, 15.0, seconds)}


def measure_catchup(work: Path, corpus: Path, lines: int) -> dict:
    """``sigwatch run`` as shipped (full library, every detector) catching up a backlog: the
    corpus is in the watched folder before the daemon starts (``--start-at beginning``).
    MB/s per core is bytes over the daemon's CPU seconds from its first /metrics answer (the
    library loaded) to the last line counted."""
    logs = _empty_folder(work / "catchup_logs")
    target = logs / "train.log"
    shutil.copyfile(corpus, target)
    size = target.stat().st_size
    d = Daemon(work, str(logs / "*.log"), None, "daemon_catchup", start_at="beginning")
    t_start = time.perf_counter()
    d.start()
    try:
        c0, t0 = d.cpu_seconds(), time.perf_counter()
        startup_cpu, startup_wall = c0, t0 - t_start
        deadline = time.time() + 3600
        while d.metric_sum("sigwatch_lines_total") < lines and time.time() < deadline:
            time.sleep(0.2)
        c1, t1 = d.cpu_seconds(), time.perf_counter()
        read = d.metric_sum("sigwatch_lines_total")
        detections = d.metric_sum("sigwatch_detections_total")
        peak = d.rss_mb("VmHWM")
    finally:
        d.stop()
    cpu = max(c1 - c0, 1e-6)
    return {"bytes": size, "lines": lines, "lines_read": read, "detections": detections,
            "cpu_s": round(cpu, 2), "wall_s": round(t1 - t0, 2),
            "mb_s_per_core": round(size / cpu / 1e6, 1),
            "mb_s_wall": round(size / max(t1 - t0, 1e-6) / 1e6, 1),
            "startup_cpu_s": round(startup_cpu, 2), "startup_wall_s": round(startup_wall, 2),
            "peak_rss_mb": round(peak, 1)}


def measure_steady(work: Path, corpus: Path, rate_mb: float, seconds: float) -> dict:
    """CPU of ``sigwatch run`` as shipped while a log grows at ``rate_mb`` MB/s (appended in
    whole lines every 100 ms), after 10 s of settling."""
    logs = _empty_folder(work / "steady_logs")
    target = logs / "train.log"
    target.write_bytes(b"")
    d = Daemon(work, str(logs / "*.log"), None, "daemon_steady")
    d.start()
    step = rate_mb * 1e6 / 10
    try:
        d.wait_watching(1)
        with corpus.open("rb") as src, target.open("ab") as out:
            def feed(duration: float) -> int:
                sent = 0
                t0 = time.perf_counter()
                k = 0
                while time.perf_counter() - t0 < duration:
                    block = src.read(int(step))
                    if len(block) < step:
                        src.seek(0)
                        block += src.read(int(step) - len(block))
                    cut = block.rfind(b"\n") + 1
                    src.seek(cut - len(block), os.SEEK_CUR)
                    out.write(block[:cut])
                    out.flush()
                    sent += cut
                    k += 1
                    pause = t0 + k * 0.1 - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
                return sent

            feed(10.0)
            c0, t0 = d.cpu_seconds(), time.perf_counter()
            sent = feed(seconds)
            c1, t1 = d.cpu_seconds(), time.perf_counter()
        peak = d.rss_mb("VmHWM")
    finally:
        d.stop()
    return {"input_mb_s": round(sent / (t1 - t0) / 1e6, 2), "seconds": round(t1 - t0, 1),
            "cpu_percent_of_core": round((c1 - c0) / (t1 - t0) * 100, 1),
            "peak_rss_mb": round(peak, 1)}


def measure_memory_stream(work: Path, p40: Path, corpus: Path, total: int) -> dict:
    logs = _empty_folder(work / "stream_logs")
    target = logs / "big.log"
    target.write_bytes(b"")
    d = Daemon(work, str(logs / "*.log"), p40, "daemon_stream")
    d.start()
    d.wait_watching(1)
    peak = d.rss_mb()
    t0 = time.perf_counter()
    try:
        written = 0
        lines = 0
        block = 8 << 20
        with corpus.open("rb") as src, target.open("ab") as out:
            while written < total:
                chunk = src.read(block)
                if not chunk:
                    src.seek(0)
                    continue
                cut = chunk.rfind(b"\n") + 1
                src.seek(cut - len(chunk), os.SEEK_CUR)
                chunk = chunk[:cut]
                out.write(chunk)
                out.flush()
                written += len(chunk)
                lines += chunk.count(b"\n")
                peak = max(peak, d.rss_mb())
                # do not run more than ~64 MB ahead of the daemon
                while written - d.metric_sum("sigwatch_bytes_read_total") > 64 << 20:
                    peak = max(peak, d.rss_mb())
                    time.sleep(0.1)
        deadline = time.time() + 600
        while d.metric_sum("sigwatch_lines_total") < lines and time.time() < deadline:
            peak = max(peak, d.rss_mb())
            time.sleep(0.2)
        elapsed = time.perf_counter() - t0
        read = d.metric_sum("sigwatch_lines_total")
    finally:
        d.stop()
    return {"bytes": written, "lines": lines, "lines_read": read, "peak_rss_mb": peak,
            "seconds": elapsed, "mb_s": written / elapsed / 1e6}


def measure_many_files(work: Path, p40: Path, files: int) -> dict:
    logs = _empty_folder(work / "many_logs")
    for k in range(files):
        (logs / f"job{k:05d}.log").write_bytes(b"step 1 loss 2.0\n" * 5)
    d = Daemon(work, str(logs / "*.log"), p40, "daemon_many")
    d.start()
    peak = d.rss_mb()
    try:
        opened = d.wait_watching(files)
        peak = max(peak, d.rss_mb())
        t0 = time.perf_counter()
        for k in range(files):  # every file gets a few new lines, errors in some
            with (logs / f"job{k:05d}.log").open("ab") as fh:
                fh.write(b"step 2 loss 1.9\n")
                if k % 100 == 0:
                    fh.write(b"RuntimeError: CUDA error: an illegal memory access was "
                             b"encountered\n")
            if k % 500 == 0:
                peak = max(peak, d.rss_mb())
        deadline = time.time() + 300
        want = files // 100
        while d.metric_sum("sigwatch_detections_total") < want and time.time() < deadline:
            peak = max(peak, d.rss_mb())
            time.sleep(0.2)
        caught_up = time.perf_counter() - t0
        time.sleep(5)
        c0, t1 = d.cpu_seconds(), time.perf_counter()
        time.sleep(10)
        idle_cpu = (d.cpu_seconds() - c0) / (time.perf_counter() - t1) * 100
        peak = max(peak, d.rss_mb())
        watched = d.metric_sum("sigwatch_files_watched")
        detections = d.metric_sum("sigwatch_detections_total")
    finally:
        d.stop()
    return {"files": files, "files_watched_metric": watched, "peak_rss_mb": peak,
            "seconds_to_open_all": opened,
            "detections": detections, "expected_detections": want,
            "seconds_to_catch_up": caught_up, "idle_cpu_percent_of_core": idle_cpu}


# --- main -------------------------------------------------------------------------------------

def print_targets(runs: list[Run], ratios: dict[str, float], daemon: dict[str, dict],
                  swfull: Run, swdet: Run, sw40: Run, mt: Run | None, hs40: Run | None,
                  gr: Run) -> None:
    """Issue 22's figures, each beside its target, with the peak memory of each run."""
    print("\nissue 22, in this run (load average %.1f %.1f %.1f):" % os.getloadavg(), flush=True)
    rows: list[tuple[str, str, str]] = []
    c = daemon.get("catchup")
    if c is not None:
        rows.append(("daemon catch-up, shipped defaults, MB/s per core",
                     f"{c['mb_s_per_core']} (peak RSS {c['peak_rss_mb']} MB)", ">= 30"))
        st = daemon["steady_1mb_s"]
        rows.append((f"daemon CPU at {st['input_mb_s']} MB/s of input, % of a core",
                     f"{st['cpu_percent_of_core']} (peak RSS {st['peak_rss_mb']} MB)", "small"))
    rows.append(("scan with detectors / without, CPU",
                 f"{swdet.cpu / swfull.cpu:.2f} (peak RSS {swdet.rss_mb:.0f} / "
                 f"{swfull.rss_mb:.0f} MB)", "<= 1.3"))
    rows.append(("scan with detectors / without, wall", f"{swdet.wall / swfull.wall:.2f}",
                 "<= 1.3"))
    rows.append(("full library / 40 signatures, CPU, start-up included",
                 f"{swfull.cpu / sw40.cpu:.2f} (peak RSS {swfull.rss_mb:.0f} / "
                 f"{sw40.rss_mb:.0f} MB)", "<= 1.5"))
    rows.append(("full library / 40 signatures, wall, start-up included",
                 f"{swfull.wall / sw40.wall:.2f}", "<= 1.5"))
    if mt is not None:
        rows.append(("40 signatures / mtail, default install",
                     f"{sw40.lines_s / mt.lines_s:.1f} (peak RSS mtail {mt.rss_mb:.0f} MB)",
                     ">= 10"))
    if hs40 is not None:
        rows.append(("40 signatures + Hyperscan / grep",
                     f"{hs40.lines_s / gr.lines_s:.2f} (peak RSS {hs40.rss_mb:.0f} MB, grep "
                     f"{gr.rss_mb:.0f} MB)", ">= 0.5"))
    else:
        rows.append(("40 signatures + Hyperscan / grep", "not measured: hyperscan not "
                     "importable (pip install -e '.[fast]')", ">= 0.5"))
    for name, value, target in rows:
        print(f"  {name:56s} {value:44s} target {target}", flush=True)

def print_health(figures: dict) -> None:
    print("  sigwatch health answer time (new process each run; peers in the same run):",
          flush=True)
    for name, fig in figures.items():
        print(f"    {name:46s} {json.dumps(fig)}", flush=True)


def generic_cost(work: Path, library, size_mb: int, repeat: int) -> int:
    """``scan`` with the generic layer on and off (``--no-generic``), alternated: the same
    library, the same other detectors, the same corpus; best wall time of each, its CPU."""
    corpus = work / "train.log"
    size = size_mb << 20
    if not corpus.exists() or abs(corpus.stat().st_size - size) > (2 << 20):
        print(f"generating {size_mb} MB corpus ...", flush=True)
        generate(corpus, size, library.signatures)
    data_size = corpus.stat().st_size
    with corpus.open("rb") as fh:
        lines = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 24), b""))
    os.environ.setdefault("SIGWATCH_CACHE_DIR", str(work / "cache"))
    scan = [PY, "-m", "sigwatch", "scan", "--format", "json", str(corpus)]
    runs: dict[str, Run] = {}
    for _ in range(repeat):  # alternated, so both see the same load on a shared machine
        for name, extra in (("generic layer on", []), ("--no-generic", ["--no-generic"])):
            out = work / f"generic_{extra[0][2:] if extra else 'on'}.jsonl"
            r = best_of(name, [*scan, *extra], 1, lines, data_size,
                        env=sigwatch_env("python"), out=out)
            r.extra["detections"] = sum(1 for _ in out.open("rb"))
            if name not in runs or r.wall < runs[name].wall:
                runs[name] = r
    print(f"corpus {corpus}: {data_size / 1e6:.1f} MB, {lines} lines; full library "
          f"({len(library.signatures)} signatures), every other detector")
    for r in runs.values():
        print(f"  {r.name:18s} {r.mb_s:6.2f} MB/s  {r.lines_s:9,.0f} lines/s  CPU {r.cpu:6.2f} s"
              f"  wall {r.wall:6.2f} s  detections {r.extra['detections']}")
    on, off = runs["generic layer on"], runs["--no-generic"]
    print(f"  generic on / off: wall {on.wall / off.wall:.3f}, CPU {on.cpu / off.cpu:.3f}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "sigwatch-bench")
    ap.add_argument("--skip-daemon", action="store_true")
    ap.add_argument("--skip-mtail", action="store_true")
    ap.add_argument("--calibrate-mtail", action="store_true",
                    help="also time mtail with a single regex (minutes more)")
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--stream-mb", type=int, default=1024)
    ap.add_argument("--only-health", action="store_true",
                    help="only the answer time of `sigwatch health` (bench/health.py)")
    ap.add_argument("--steady-seconds", type=float, default=30.0,
                    help="how long the shipped daemon is fed 1 MB/s for its CPU figure")
    ap.add_argument("--skip-catchup", action="store_true",
                    help="skip the shipped daemon's catch-up and steady 1 MB/s figures")
    ap.add_argument("--skip-400", action="store_true", help="skip the 400-signature runs")
    ap.add_argument("--only-generic", action="store_true",
                    help="only scan with the generic layer on and --no-generic (full library, "
                         "every other detector), alternated --repeat times")
    ap.add_argument("--only-idle", action="store_true",
                    help="only the idle-CPU measurements (10,000 files; 20,000 folders)")
    args = ap.parse_args()
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    if args.only_health:
        print_health(measure_health(work / "health"))
        return 0
    if args.only_idle:
        library, _errors = load_patterns([builtin_pattern_dir()])
        p40, _p400, _sig40 = write_sets(library, work)
        idle = {"idle_10000_files": measure_idle_files(work, p40, 10_000, args.idle_seconds)}
        print(f"  idle, 10,000 files:            {json.dumps(idle['idle_10000_files'])}",
              flush=True)
        idle["idle_20000_dirs"] = measure_idle_tree(work, p40, 20_000, args.idle_seconds)
        print(f"  idle, 20,000 dirs (*/logs/*):  {json.dumps(idle['idle_20000_dirs'])}",
              flush=True)
        (work / "idle.json").write_text(json.dumps(idle, indent=2), encoding="utf-8")
        return 0

    library, errors = load_patterns([builtin_pattern_dir()])
    if errors:
        raise SystemExit(f"library does not load: {errors[0]}")
    if args.only_generic:
        return generic_cost(work, library, args.size_mb, args.repeat)
    p40, p400, sig40 = write_sets(library, work)
    corpus = work / "train.log"
    size = args.size_mb << 20
    if not corpus.exists() or abs(corpus.stat().st_size - size) > (2 << 20):
        print(f"generating {args.size_mb} MB corpus ...", flush=True)
        generate(corpus, size, library.signatures)
    data_size = corpus.stat().st_size
    with corpus.open("rb") as fh:
        lines = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 24), b""))
    print(f"corpus {corpus}: {data_size / 1e6:.1f} MB, {lines} lines; "
          f"{len(sig40)} and 400 signatures", flush=True)

    runs: list[Run] = []
    scan = [PY, "-m", "sigwatch", "scan", "--format", "json"]

    def sw(name: str, pdir: Path, backend: str, extra: tuple[str, ...] = ()) -> Run:
        out = work / f"{name.replace(' ', '_').replace('/', '_')}.jsonl"
        r = best_of(name, [*scan, *extra, "--patterns", str(pdir), str(corpus)], args.repeat,
                    lines, data_size, env=sigwatch_env(backend), out=out)
        r.extra["detections"] = sum(1 for _ in out.open("rb"))
        empty = work / "empty.log"
        empty.write_bytes(b"")
        start = best_of(name + " start-up", [*scan, "--patterns", str(pdir), str(empty)],
                        args.repeat, 0, 0, env=sigwatch_env(backend))
        r.extra["startup_s"] = round(start.wall, 3)
        r.extra["mb_s_after_startup"] = round(data_size / max(r.wall - start.wall, 1e-6) / 1e6, 1)
        runs.append(r)
        print(f"  {name}: {r.mb_s:.1f} MB/s", flush=True)
        return r

    # The analysis cache is warmed once (as any second start finds it); the scans below then
    # start as a user's scan does.
    os.environ.setdefault("SIGWATCH_CACHE_DIR", str(work / "cache"))
    for pdir in (p40, builtin_pattern_dir()):
        subprocess.run([*scan, "--no-detectors", "--patterns", str(pdir), os.devnull],
                       env=sigwatch_env("python"), stdout=subprocess.DEVNULL, check=False)
    sw40 = sw("sigwatch 40 sigs (default install)", p40, "python", ("--no-detectors",))
    sw400 = None if args.skip_400 else sw("sigwatch 400 sigs (default install)", p400,
                                          "python", ("--no-detectors",))
    full = builtin_pattern_dir()
    nfull = len(library.signatures)
    swfull = sw(f"sigwatch full library ({nfull} sigs), --no-detectors", full, "python",
                ("--no-detectors",))
    swdet = sw(f"sigwatch full library ({nfull} sigs) + detectors (scan's default)", full,
               "python")
    # The generic layer (issue 20) on and off, same library, same corpus, same run.
    swnogen = sw(f"sigwatch full library ({nfull} sigs) + detectors, --no-generic", full,
                 "python", ("--no-generic",))
    hs40 = hs400 = None
    if hyperscan_importable():
        hs40 = sw("sigwatch 40 sigs + hyperscan", p40, "hyperscan", ("--no-detectors",))
        if not args.skip_400:
            hs400 = sw("sigwatch 400 sigs + hyperscan", p400, "hyperscan", ("--no-detectors",))

    mt = None
    if not args.skip_mtail:
        mtail = ensure_mtail()
        if mtail is None:
            print("  mtail unavailable: skipped", flush=True)
        else:
            progs = work / "mtail_progs"
            shutil.rmtree(progs, ignore_errors=True)
            progs.mkdir()
            (progs / "sigwatch40.mtail").write_text(mtail_program(sig40), encoding="utf-8")
            check = subprocess.run([mtail, "--compile_only", "--progs", str(progs),
                                    "--logtostderr"], capture_output=True, text=True, check=False)
            if check.returncode != 0:
                raise SystemExit(f"mtail rejects the generated program:\n{check.stderr[-2000:]}")
            # mtail is slow here: one run each (minutes), not --repeat.
            mt = best_of("mtail 40 sigs", [mtail, "--one_shot", "--one_shot_format", "json",
                                           "--progs", str(progs), "--logs", str(corpus),
                                           "--logtostderr"],
                         1, lines, data_size, out=work / "mtail.json")
            runs.append(mt)
            print(f"  mtail: {mt.mb_s:.1f} MB/s", flush=True)
            # mtail's reader slows down about 15x on non-ASCII bytes (tqdm's block characters
            # are enough). So that the ratio does not rest on that alone, both tools also run
            # on a copy of the corpus with every non-ASCII byte replaced by '?'.
            ascii_corpus = work / "train_ascii.log"
            if not ascii_corpus.exists() or ascii_corpus.stat().st_size != data_size:
                table = bytes(b if b < 128 else 63 for b in range(256))
                with corpus.open("rb") as src, ascii_corpus.open("wb") as dst:
                    for block in iter(lambda: src.read(1 << 24), b""):
                        dst.write(block.translate(table))
            mt_ascii = best_of("mtail 40 sigs, ASCII-only copy",
                               [mtail, "--one_shot", "--progs", str(progs), "--logs",
                                str(ascii_corpus), "--logtostderr"],
                               1, lines, data_size, out=work / "mtail_ascii.txt")
            runs.append(mt_ascii)
            sw40_ascii = best_of("sigwatch 40 sigs, ASCII-only copy",
                                 [*scan, "--no-detectors", "--patterns", str(p40),
                                  str(ascii_corpus)],
                                 args.repeat, lines, data_size, env=sigwatch_env("python"),
                                 out=work / "sigwatch_ascii.jsonl")
            runs.append(sw40_ascii)
            print(f"  ASCII copy: mtail {mt_ascii.mb_s:.1f} MB/s, sigwatch "
                  f"{sw40_ascii.mb_s:.1f} MB/s", flush=True)
        if mtail is not None and args.calibrate_mtail:
            # Calibration: mtail with a single regex, to show its floor on this machine.
            one = work / "mtail_one"
            shutil.rmtree(one, ignore_errors=True)
            one.mkdir()
            (one / "one.mtail").write_text(
                "counter oom\n/CUDA error: out of memory/ {\n  oom++\n}\n", encoding="utf-8")
            mt1 = best_of("mtail 1 regex (calibration)",
                          [mtail, "--one_shot", "--progs", str(one), "--logs", str(corpus),
                           "--logtostderr"], 1, lines, data_size)
            runs.append(mt1)
            print(f"  mtail 1 regex: {mt1.mb_s:.1f} MB/s", flush=True)

    grep_file = work / "grep40.txt"
    grep_file.write_text("\n".join(ere(st.source) for s in sig40 for st in s.steps) + "\n",
                         encoding="utf-8")
    # -a: the log holds NULs and invalid UTF-8; without it grep calls it binary and stops at
    # the first match.
    gr = best_of("grep -a -E -f, 40 sigs",
                 ["grep", "-a", "-E", "-c", "-f", str(grep_file), str(corpus)],
                 args.repeat, lines, data_size, env=dict(os.environ, LC_ALL="C"),
                 out=work / "grep.out")  # to /dev/null, GNU grep stops at the first match
    runs.append(gr)
    print(f"  grep: {gr.mb_s:.1f} MB/s", flush=True)

    print()
    print(f"{'run':40s} {'lines/s':>12s} {'MB/s':>8s} {'CPU s':>7s} {'peak RSS MB':>12s}"
          f" {'detections':>10s} {'start-up s':>10s} {'MB/s after start-up':>20s}")
    for r in runs:
        print(f"{r.name:40s} {r.lines_s:12,.0f} {r.mb_s:8.1f} {r.cpu:7.2f} {r.rss_mb:12.1f}"
              f" {r.extra.get('detections', ''):>10} {r.extra.get('startup_s', ''):>10}"
              f" {r.extra.get('mb_s_after_startup', ''):>20}")
    print()
    ratios: dict[str, float] = {}
    ratios["scan with detectors / without, wall (target <= 1.3)"] = swdet.wall / swfull.wall
    ratios["scan with detectors / without, CPU (target <= 1.3)"] = swdet.cpu / swfull.cpu
    ratios["scan with the generic layer / --no-generic, wall"] = swdet.wall / swnogen.wall
    ratios["scan with the generic layer / --no-generic, CPU"] = swdet.cpu / swnogen.cpu
    ratios["full library / 40 sigs, wall, start-up included (target <= 1.5)"] = (
        swfull.wall / sw40.wall)
    ratios["full library / 40 sigs, CPU, start-up included (target <= 1.5)"] = (
        swfull.cpu / sw40.cpu)
    if mt is not None:
        ratios["sigwatch40 / mtail40 (target >= 10)"] = sw40.lines_s / mt.lines_s
        ratios["same, on the ASCII-only copy (target >= 10)"] = (
            sw40_ascii.lines_s / mt_ascii.lines_s)
        ratios["sigwatch40 CPU-time advantage over mtail40"] = mt.cpu / sw40.cpu
    if sw400 is not None:
        ratios["sigwatch400 / sigwatch40 (target >= 0.33)"] = sw400.lines_s / sw40.lines_s
    if hs40 is not None:
        ratios["hyperscan40 / grep40 (target >= 0.5)"] = hs40.lines_s / gr.lines_s
        if mt is not None:
            ratios["hyperscan40 / mtail40"] = hs40.lines_s / mt.lines_s
        same = hs40.extra["detections"] == sw40.extra["detections"]
        if hs400 is not None and sw400 is not None:
            ratios["hyperscan400 / hyperscan40"] = hs400.lines_s / hs40.lines_s
            same = same and hs400.extra["detections"] == sw400.extra["detections"]
        ratios["hyperscan and default give the same detection counts (1 = yes)"] = float(same)
    for k, v in ratios.items():
        print(f"{k:62s} {v:8.2f}")

    daemon: dict[str, dict] = {}
    if not args.skip_catchup:
        print("\ndaemon as shipped (sigwatch run: full library, every detector):", flush=True)
        daemon["catchup"] = measure_catchup(work, corpus, lines)
        print(f"  catch-up:  {json.dumps(daemon['catchup'])}", flush=True)
        daemon["steady_1mb_s"] = measure_steady(work, corpus, 1.0, args.steady_seconds)
        print(f"  1 MB/s:    {json.dumps(daemon['steady_1mb_s'])}", flush=True)
        c = daemon["catchup"]
        print(f"  catch-up {c['mb_s_per_core']} MB/s per core (target >= 30), "
              f"{c['mb_s_wall']} MB/s wall, peak RSS {c['peak_rss_mb']} MB; "
              f"at 1 MB/s input: {daemon['steady_1mb_s']['cpu_percent_of_core']} % of a core",
              flush=True)
    if not args.skip_daemon:
        print("\ndaemon (pure-Python prefilter, 40 signatures):", flush=True)
        daemon["latency"] = measure_latency(work, p40, args.probes)
        print(f"  latency: {json.dumps(daemon['latency'])}", flush=True)
        daemon["idle_1000"] = measure_idle(work, p40, 1000, args.idle_seconds)
        print(f"  idle:    {json.dumps(daemon['idle_1000'])}", flush=True)
        daemon["stream_1gb"] = measure_memory_stream(work, p40, corpus, args.stream_mb << 20)
        print(f"  stream:  {json.dumps(daemon['stream_1gb'])}", flush=True)
        daemon["files_10000"] = measure_many_files(work, p40, 10_000)
        print(f"  10k:     {json.dumps(daemon['files_10000'])}", flush=True)
        daemon["idle_10000_files"] = measure_idle_files(work, p40, 10_000, args.idle_seconds)
        print(f"  idle, 10,000 files:  {json.dumps(daemon['idle_10000_files'])}", flush=True)
        daemon["idle_20000_dirs"] = measure_idle_tree(work, p40, 20_000, args.idle_seconds)
        print(f"  idle, 20,000 dirs under */logs/*: {json.dumps(daemon['idle_20000_dirs'])}",
              flush=True)
        daemon["health"] = measure_health(work / "health")
        print_health(daemon["health"])

    print_targets(runs, ratios, daemon, swfull, swdet, sw40, mt, hs40, gr)

    result = {
        "command": " ".join([Path(PY).name, *sys.argv]),
        "corpus": {"path": str(corpus), "bytes": data_size, "lines": lines},
        "runs": [{"name": r.name, "lines_per_s": r.lines_s, "mb_per_s": r.mb_s,
                  "cpu_s": r.cpu, "peak_rss_mb": r.rss_mb, "wall_s": r.wall, **r.extra}
                 for r in runs],
        "ratios": ratios, "daemon": daemon,
        "signatures_40": [s.id for s in sig40],
        "cpus": os.cpu_count(), "load_avg": os.getloadavg(),
    }
    (work / "results.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(f"\nresults: {work / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
