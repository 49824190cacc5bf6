"""The shipped verdict rules evaluated on what real daemons export, on simulated time.

``SimFleet(root, nodes, start)`` builds one real sigwatch daemon per node in-process
(``build_daemon``: the file source and its polling, framing and timestamps, the shipped
signature library, job identity from the path, the job book and its gauges), each on its own
fake clock. ``SimFleet.run(cascade)`` moves the clocks (each node's offset by the cascade's
skew), writes the cascade's lines into the node's files at their write times, pumps the
daemons, and every 5 s of simulated time scrapes the job's gauges from their registries as
Prometheus would store them (the target's ``job``/``node``, the daemon's own renamed
``exported_job``/``exported_node``).

``promtool_group(run, name)`` turns a run into one ``promtool test rules`` group against the
shipped rule file; its tests expect nothing, so promtool prints what the rules *did* fire:
every SigwatchJobIncident and SigwatchJobStraggler label set, and the first time each fired.
``evaluate(runs)`` runs promtool once over many groups and reads those back (``Fired``).
Nothing of the rules is re-implemented here.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from sigwatch.app import Daemon, build_daemon
from sigwatch.clock import FakeClock
from sigwatch.config import Config, SourceConfig
from support.cascades import JOB_LOGS, KERNEL_FILE, Cascade, CascadeWriter

__all__ = ["SCRAPE_SECONDS", "Fired", "Run", "SimFleet", "evaluate", "judge", "promtool_group"]

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "rules" / "sigwatch.rules.yml"
SCRAPE_SECONDS = 5.0
TICK = 0.5           # lines written within a tick are read together
LEAD = 10.0          # simulated seconds scraped before a cascade's first line
TAIL = 90.0          # and after its last one (the verdict settles, the straggler's `for`)
SCRAPED = {
    "sigwatch_job_fault_first_seconds": True,      # True: a Unix time (shifted to test time)
    "sigwatch_job_rank_collective_seq": False,
    "sigwatch_job_rank_step": False,
    "sigwatch_job_rank_step_seconds": False,
}
ALERTS = 'ALERTS{alertstate="firing",alertname=~"SigwatchJobIncident|SigwatchJobStraggler"}'


@dataclass
class Run:
    """One cascade as Prometheus saw it: samples per series at each scrape (``None`` = absent)."""

    cascade: Cascade
    origin: float                     # the true time of promtool's t = 0
    times: list[float] = field(default_factory=list)
    series: dict[str, list[float | None]] = field(default_factory=dict)

    def add(self, at: float, samples: dict[str, float]) -> None:
        index = len(self.times)
        self.times.append(at)
        for key, value in samples.items():
            self.series.setdefault(key, [None] * index).append(value)
        for values in self.series.values():
            if len(values) == index:
                values.append(None)


@dataclass(frozen=True)
class Fired:
    """An alert the shipped rules fired for a run: its labels and when it first fired (true
    time)."""

    labels: dict[str, str]
    first: float


class _Node:
    def __init__(self, name: str, root: Path, start: float) -> None:
        self.name = name
        self.root = root
        (root / "jobs").mkdir(parents=True, exist_ok=True)
        (root / KERNEL_FILE).parent.mkdir(parents=True, exist_ok=True)
        (root / KERNEL_FILE).touch()
        self.clock = FakeClock(start)
        config = Config(
            sources=[SourceConfig(name="training", paths=[str(root / "jobs" / "**" / "*.log")],
                                  labels_from_path=JOB_LOGS, start_at="beginning"),
                     SourceConfig(name="kernel", paths=[str(root / KERNEL_FILE)],
                                  content="kernel", start_at="beginning")],
            state_dir=root / "state", console=False, inotify=False, node=name,
            poll_interval=0.5, rescan_interval=2.0, checkpoint_interval=60.0)
        self.daemon: Daemon = build_daemon(config, clock=self.clock, registry=CollectorRegistry())
        self.daemon.runtime.start()

    def move_to(self, t: float) -> None:
        """Set the node's clock to ``t`` (never backwards)."""
        self.clock.advance(max(0.0, t - self.clock.time()))

    def pump(self) -> None:
        for _ in range(1000):
            if not self.daemon.runtime.run_once():
                return

    def scrape(self, job: str) -> dict[str, float]:
        """The job's gauges as Prometheus stores them (series text -> value)."""
        out: dict[str, float] = {}
        for family in self.daemon.registry.restricted_registry(list(SCRAPED)).collect():
            for s in family.samples:
                if s.name not in SCRAPED or s.labels.get("job") != job:
                    continue
                if s.name == "sigwatch_job_rank_collective_seq" and \
                        s.labels.get("kind") == "last_completed":
                    continue
                labels = {"job": "sigwatch", "instance": f"{self.name}:9750", "node": self.name,
                          **{("exported_" + k if k in ("job", "node") else k): v
                             for k, v in s.labels.items()}}
                text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if v != "")
                out[f"{s.name}{{{text}}}"] = s.value
        return out

    def stop(self) -> None:
        self.daemon.runtime.stop()


class SimFleet:
    """Real daemons, one per node name, on simulated clocks (true time + the node's skew)."""

    def __init__(self, root: Path, nodes: Sequence[str], start: float) -> None:
        self.root = root
        self.now = start
        self.nodes = {n: _Node(n, root / n, start) for n in nodes}

    def _move(self, t: float, skew: dict[str, float]) -> None:
        self.now = t
        for name, node in self.nodes.items():
            node.move_to(t + skew.get(name, 0.0))

    def run(self, cascade: Cascade, *, tail: float = TAIL) -> Run:
        """Play ``cascade`` (its times must be after the fleet's ``now``), scraping every 5 s."""
        first = min(x.written for x in cascade.lines)
        origin = math.floor(first - LEAD)
        assert origin >= self.now, "cascades must come in time order"
        nodes = [self.nodes[n] for n in cascade.layout.nodes]
        writer = CascadeWriter({n.name: n.root for n in nodes})
        writer.add(cascade)
        run = Run(cascade, origin)
        next_scrape = float(origin)
        end = cascade.end + tail
        t = float(origin)
        while t <= end:
            pending = writer.next_time
            t = min(next_scrape, pending if pending is not None else math.inf)
            if pending is not None and pending <= next_scrape:
                t = math.ceil(t / TICK) * TICK
            self._move(t, cascade.skew)
            if writer.write_until(t):
                for node in nodes:
                    node.pump()
            if t >= next_scrape:
                for node in nodes:
                    node.pump()  # the polls and ticks due by now
                samples: dict[str, float] = {}
                for node in nodes:
                    samples.update(node.scrape(cascade.layout.job))
                run.add(t, samples)
                next_scrape += SCRAPE_SECONDS
        self._end_job(cascade)
        return run

    def _end_job(self, cascade: Cascade) -> None:
        """The job's logs go away: its streams close, it stops being active, its gauges go."""
        for name in cascade.layout.nodes:
            shutil.rmtree(self.nodes[name].root / "jobs" / cascade.layout.job,
                          ignore_errors=True)
        for step in range(4):
            self._move(self.now + 1.0 + step, {})
            for name in cascade.layout.nodes:
                self.nodes[name].pump()

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()


# -- promtool ---------------------------------------------------------------------------------


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def _values(samples: Sequence[float | None]) -> str:
    """promtool's expanding notation: ``_xN`` gaps, ``vxN`` repeats, ``stale`` after the end."""
    tokens: list[str] = []
    previous_present = False
    for value in samples:
        if value is None:
            tokens.append("stale" if previous_present else "_")
            previous_present = False
        else:
            tokens.append(_number(value))
            previous_present = True
    out: list[str] = []
    i = 0
    while i < len(tokens):
        j = i
        while j + 1 < len(tokens) and tokens[j + 1] == tokens[i] and tokens[i] != "stale":
            j += 1
        count = j - i + 1
        if tokens[i] == "_":
            out.append("_" if count == 1 else f"_x{count}")
        else:
            out.append(tokens[i] if count == 1 else f"{tokens[i]}x{count - 1}")
        i = j + 1
    return " ".join(out)


def promtool_group(run: Run, name: str) -> dict[str, Any]:
    """A ``test rules`` group asking what the shipped rules fired for ``run``."""
    series = []
    for key, values in sorted(run.series.items()):
        metric = key.split("{", 1)[0]
        shifted = [None if v is None else (v - run.origin if SCRAPED[metric] else v)
                   for v in values]
        series.append({"series": key, "values": _values(shifted)})
    at = f"{int(run.times[-1] - run.origin)}s"
    window = f"{int(run.times[-1] - run.origin) + 5}s"
    return {
        "name": name,
        "interval": f"{int(SCRAPE_SECONDS)}s",
        "input_series": series,
        "promql_expr_test": [
            {"expr": f'label_replace(max_over_time({ALERTS}[{window}]), "run", "{name}", "", "")',
             "eval_time": at, "exp_samples": []},
            {"expr": (f"label_replace(min_over_time(timestamp({ALERTS})[{window}:5s]), "
                      f'"run", "{name}", "", "")'),
             "eval_time": at, "exp_samples": []},
        ],
    }


_GOT = re.compile(r"\{([^{}]*)\} ([-+0-9.eE]+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def evaluate(runs: Iterable[tuple[str, Run]], workdir: Path,
             promtool: str = "promtool") -> dict[str, list[Fired]]:
    """Run promtool once over every run; what fired, per run name."""
    runs = list(runs)
    tests = {"rule_files": [str(RULES)], "evaluation_interval": f"{int(SCRAPE_SECONDS)}s",
             "tests": [promtool_group(run, name) for name, run in runs]}
    path = workdir / "verdict_runs.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False, width=1_000_000))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True,
                          text=True, check=False, timeout=3600)
    output = done.stdout + done.stderr
    if done.returncode != 0 and "got:" not in output:
        raise RuntimeError(f"promtool failed: {output[-3000:]}")
    origins = {name: run.origin for name, run in runs}
    seen: dict[str, dict[tuple[tuple[str, str], ...], float]] = {name: {} for name, _ in runs}
    for line in output.splitlines():
        line = line.strip()
        if not line.startswith("got:"):
            continue
        for labels_text, value in _GOT.findall(line):
            labels = dict(_LABEL.findall(labels_text))
            name = labels.pop("run")
            labels.pop("alertstate", None)
            key = tuple(sorted(labels.items()))
            first = seen[name].setdefault(key, math.inf)
            if float(value) != 1.0:  # the first-firing time (a presence is 1)
                seen[name][key] = min(first, float(value) + origins[name])
    return {name: [Fired(dict(k), v) for k, v in found.items()]
            for name, found in seen.items()}


# -- judging -------------------------------------------------------------------------------------


def judge(cascade: Cascade, fired: list[Fired]) -> tuple[bool, str, float | None]:
    """(right?, what was said, seconds from the first fault line to the first verdict).

    Right: the job's last verdict names the expected owner, node and rank (and signature,
    where one is expected), and any earlier one (a verdict refined after it fired) named no
    other node; for a straggler, exactly its node was warned and no verdict fired.
    """
    job = cascade.layout.job
    incidents = [f for f in fired if f.labels.get("alertname") == "SigwatchJobIncident"
                 and f.labels.get("job") == job]
    stragglers = [f for f in fired if f.labels.get("alertname") == "SigwatchJobStraggler"
                  and f.labels.get("job") == job]
    exp = cascade.expected
    if not exp.fails:
        said = ",".join(sorted(f.labels.get("node", "") for f in stragglers)) or "-"
        right = not incidents and [exp.straggler] == [f.labels.get("node") for f in stragglers]
        return right, f"straggler {said}" + (" +incident" if incidents else ""), None
    if not incidents:
        return False, "no verdict", None
    incidents.sort(key=lambda f: f.first)
    said = " -> ".join(
        f"{f.labels.get('owner')} {f.labels.get('culprit_node', '-')}"
        f"/{f.labels.get('culprit_rank', '-')} {f.labels.get('signature')}"
        f" [{f.labels.get('basis')}]" for f in incidents)
    *earlier, final = incidents
    labels = final.labels
    right = (labels.get("owner") == exp.owner
             and labels.get("culprit_node", "") == exp.culprit_node
             and labels.get("culprit_rank", "") in exp.culprit_ranks
             and (not exp.signatures or labels.get("signature") in exp.signatures)
             # a refinement may only add a culprit: an earlier verdict named none, or the same
             and all(f.labels.get("culprit_node", "") in ("", exp.culprit_node) for f in earlier))
    return right, said, incidents[0].first - cascade.first_fault_written
