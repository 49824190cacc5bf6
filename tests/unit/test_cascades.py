"""The failure cascades the verdict is tested and scored on (``support.cascades``) say what real
nodes say: the shipped library recognises each root fault with the owner and severity the
verdict relies on, the collateral is what PyTorch and torchrun print, and times, skew and
late lines are as documented."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import pytest
from support.cascades import KERNEL_FILE, RELEASES, Cascade, Layout, generate

from sigwatch.app import build_generic, build_pipeline
from sigwatch.clock import FakeClock
from sigwatch.model import Detection, StreamInfo
from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns
from sigwatch.pipeline import Engine
from sigwatch.scanning import scan_bytes
from sigwatch.sinks.base import CollectingSink

NODES = tuple(f"gpu-node-{i}" for i in range(4))
# A Python traceback that ends a rank: the library's signature, or the generic layer's shape.
USER_TRACEBACKS = {"python_uncaught_exception", "generic_traceback"}
START = 1_790_000_000.0


@pytest.fixture(name="engine", scope="module")
def _engine() -> Engine:
    patterns, errors = load_patterns([builtin_pattern_dir()])
    assert [] == errors
    return Engine(patterns)


def detections(engine: Engine, cascade: Cascade, node: str) -> dict[str, list[Detection]]:
    """What the shipped library and the generic layer find in each of the node's files (rank
    logs first)."""
    clock = FakeClock(START)
    pipeline = build_pipeline(engine, [CollectingSink()], clock=clock,
                              content={"kernel": "kernel", "training": "job"},
                              detectors=[build_generic(clock=clock)])
    files: dict[str, list[str]] = {}
    for line in cascade.by_write_time():
        if line.node == node:
            files.setdefault(line.file, []).append(line.text)
    out: dict[str, list[Detection]] = {}
    for name in sorted(files, key=lambda f: ("launcher" in f, f)):
        source = "kernel" if name == KERNEL_FILE else "training"
        data = ("\n".join(files[name]) + "\n").encode()
        out[name] = scan_bytes(pipeline, StreamInfo(source, f"/{node}/{name}", name), data)
    return out


def found(found_in: dict[str, list[Detection]], signature: str) -> Iterator[Detection]:
    for ds in found_in.values():
        yield from (d for d in ds if d.signature == signature)


def cascade(kind: str, *, release: str = "2.6", culprit: int = 1, **kw: float) -> Cascade:
    return generate(kind, Layout("job-t", NODES), random.Random(4), start=START,
                    culprit=culprit, release=release, **kw)


class TestRootFaultsAreWhatTheLibraryKnows:
    def test_a_gpu_off_the_bus_is_a_critical_node_fault_in_the_kernel_log(
            self, engine: Engine) -> None:
        c = cascade("xid79", culprit=2)

        [xid] = found(detections(engine, c, "gpu-node-2"), "nvidia_xid_79_fallen_off_bus")

        assert ("node", "critical") == (xid.owner, xid.severity.label)

    @pytest.mark.parametrize("release", RELEASES)
    def test_every_other_rank_times_out_in_its_releases_wording(
            self, engine: Engine, release: str) -> None:
        c = cascade("xid79", release=release, culprit=2)
        for node in ("gpu-node-0", "gpu-node-1", "gpu-node-3"):
            per_file = detections(engine, c, node)
            timed_out = {name for name, ds in per_file.items()
                         if any(d.signature == "nccl_watchdog_timeout" for d in ds)}

            assert {f"jobs/job-t/rank{r}.log" for r in c.layout.ranks_of(node)} == timed_out

    def test_an_infiniband_port_down_is_a_fabric_error_on_its_node_first(
            self, engine: Engine) -> None:
        c = cascade("ib_port", culprit=1)

        on_node = list(found(detections(engine, c, "gpu-node-1"), "nccl_ib_completion_error"))
        module = list(found(detections(engine, c, "gpu-node-1"), "network_mlx5_cable_event"))
        on_peer = list(found(detections(engine, c, "gpu-node-0"), "nccl_ib_completion_error"))

        assert {("fabric", "error")} == {(d.owner, d.severity.label) for d in on_node}
        assert [("fabric", "warning")] == [(d.owner, d.severity.label) for d in module]
        assert on_peer  # the peer that sends to it gives up too, after its IB retries
        completions = [x for x in c.lines if "Got completion" in x.text]
        assert max(x.happened for x in completions if x.node == "gpu-node-1") + 4.0 < \
            min(x.happened for x in completions if x.node == "gpu-node-0")

    @pytest.mark.parametrize("release", ["1.13", "2.6"])
    def test_the_same_exception_on_every_rank_is_a_user_error_on_every_rank(
            self, engine: Engine, release: str) -> None:
        c = cascade("user_all", release=release)
        for node in NODES:
            per_file = detections(engine, c, node)
            for rank in c.layout.ranks_of(node):
                [d] = [d for d in per_file[f"jobs/job-t/rank{rank}.log"]
                       if d.signature in USER_TRACEBACKS]

                assert ("user", "error") == (d.owner, d.severity.label)

    @pytest.mark.parametrize("release", ["2.4", "2.6"])
    def test_a_stuck_rank_does_not_time_out_and_prints_that_it_is_one_behind(
            self, release: str) -> None:
        c = cascade("laggard", release=release, culprit=6)
        stuck = [x.text for x in c.lines if x.file == "jobs/job-t/rank6.log"]
        other = [x.text for x in c.lines if x.file == "jobs/job-t/rank7.log"]

        seq = int(re.search(r"SeqNum=(\d+)", "\n".join(other)).group(1))  # type: ignore[union-attr]
        assert not any("Watchdog caught" in t for t in stuck)
        assert any(f"Last enqueued NCCL work: {seq - 1}, last completed NCCL work: {seq - 1}"
                   in t for t in stuck)
        assert any(f"last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}" in t
                   for t in other)


class TestTimes:
    def test_stamps_are_on_each_nodes_clock_within_two_seconds(self) -> None:
        c = cascade("xid79", culprit=2)

        assert all(abs(s) <= 2.0 for s in c.skew.values())
        for line in c.lines:
            if line.file == KERNEL_FILE and "Xid" in line.text:
                assert line.text.startswith(_iso(line.happened + c.skew[line.node]))

    def test_a_late_kernel_line_is_written_after_the_first_other_error_but_stamped_before(
            self) -> None:
        c = cascade("xid79", culprit=2, late=8.0, timeout=6.0)
        [xid] = [x for x in c.lines if x.file == KERNEL_FILE and "Xid" in x.text]
        others = [x for x in c.lines if x.fault and x.file != KERNEL_FILE]

        assert 8.0 == pytest.approx(xid.written - min(x.written for x in others), abs=1e-3)
        assert xid.happened < min(x.happened for x in others)

    def test_a_straggler_steps_slower_by_the_slowdown_and_nothing_fails(self) -> None:
        c = cascade("straggler", culprit=3, slowdown=1.4)

        def mean_step(node: str) -> float:
            times = [float(m.group(1)) for x in c.lines if x.node == node
                     for m in [re.search(r"step_time ([\d.]+)s", x.text)] if m]
            return sum(times) / len(times)

        assert 1.4 == pytest.approx(mean_step("gpu-node-3") / mean_step("gpu-node-0"), rel=0.03)
        assert not c.expected.fails and not any(x.fault for x in c.lines)


def _iso(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")
