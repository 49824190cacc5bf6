"""Watching that scales: inotify only where a glob can match; overflow falls back to polling."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from sigwatch.clock import FakeClock
from sigwatch.sources.discovery import SourceSpec
from sigwatch.sources.files import FileSource, TailOptions
from sigwatch.sources.watching import (
    IN_CREATE,
    IN_ISDIR,
    IN_Q_OVERFLOW,
    InotifyHints,
    SafetyNet,
    plan_directories,
    unmatched_globs,
)
from sigwatch.telemetry.metrics import SelfMetrics


def _scratch(root: Path, jobs: int) -> None:
    for j in range(jobs):
        job = root / f"job{j}"
        (job / "logs").mkdir(parents=True)
        (job / "logs" / "rank0.out").write_text("step 1\n")
        for k in range(3):
            (job / "ckpt" / f"step{k}").mkdir(parents=True)


class TestPlan:
    def test_a_mid_path_wildcard_watches_only_folders_the_glob_can_match(
            self, tmp_path: Path) -> None:
        """root, each job folder (its logs may appear) and each logs folder; no checkpoints."""
        _scratch(tmp_path, 3)

        plan = plan_directories(str(tmp_path / "*" / "logs" / "*.out"))

        expected = {str(tmp_path)} | {str(tmp_path / f"job{j}") for j in range(3)} | {
            str(tmp_path / f"job{j}" / "logs") for j in range(3)}
        assert expected == set(plan.directories)
        assert plan.complete

    def test_a_missing_folder_is_watched_through_its_deepest_existing_ancestor(
            self, tmp_path: Path) -> None:
        plan = plan_directories(str(tmp_path / "later" / "logs" / "*.log"))

        assert {str(tmp_path)} == set(plan.directories)

    def test_double_star_watches_everything_below_it(self, tmp_path: Path) -> None:
        _scratch(tmp_path, 1)

        plan = plan_directories(str(tmp_path / "**" / "*.out"))

        assert str(tmp_path / "job0" / "ckpt" / "step2") in plan.directories


class TestInotifyHints:
    def test_a_new_job_folder_is_watched_and_its_file_wakes_the_pump(
            self, tmp_path: Path) -> None:
        _scratch(tmp_path, 1)
        wake = threading.Event()
        hints = InotifyHints(wake)
        try:
            assert "inotify" == hints.start([str(tmp_path / "*" / "logs" / "*.out")])
            (tmp_path / "job9" / "logs").mkdir(parents=True)
            assert wake.wait(10)
            wake.clear()
            _dirty, rescan = hints.take()  # replans: job9 and job9/logs are watched now
            assert rescan
            assert hints.covers(str(tmp_path / "job9" / "logs"))

            (tmp_path / "job9" / "logs" / "rank0.out").write_text("hello\n")
            assert wake.wait(10)
            dirty, _rescan = hints.take()
        finally:
            hints.stop()

        assert str(tmp_path / "job9" / "logs" / "rank0.out") in dirty

    def test_a_folder_made_while_its_parent_was_being_watched_is_watched_too(
            self, tmp_path: Path, monkeypatch) -> None:
        """The kubelet makes <pod>/<container>/ in one instant: a folder that appears after
        the plan listed its parent, before the parent's watch exists, raises no event; the
        refresh plans again until nothing new is watched."""
        import sigwatch.sources.watching as watching

        plans: list[set[str]] = []
        real = watching.plan_directories

        def racing(pattern: str, **kw: object) -> watching.TreePlan:
            plan = real(pattern, **kw)  # type: ignore[arg-type]
            plans.append(set(plan.directories))
            if (tmp_path / "pod").is_dir() and not (tmp_path / "pod" / "ctr").exists():
                (tmp_path / "pod" / "ctr").mkdir()  # after the plan, before the watch
            return plan

        hints = InotifyHints(threading.Event())
        try:
            hints.start([str(tmp_path / "*" / "*" / "*.log")])
            monkeypatch.setattr(watching, "plan_directories", racing)
            (tmp_path / "pod").mkdir()
            hints.handle_events(hints.trees[0], struct.pack(
                "iIII", hints.trees[0].by_path[str(tmp_path)], IN_CREATE | IN_ISDIR, 0, 4)
                + b"pod\0")
            _dirty, rescan = hints.take()
        finally:
            hints.stop()

        assert rescan
        assert str(tmp_path / "pod" / "ctr") not in plans[0]
        assert hints.covers(str(tmp_path / "pod" / "ctr"))

    def test_an_event_of_a_watch_not_recorded_yet_asks_for_a_rescan(
            self, tmp_path: Path) -> None:
        """Events of a new watch can be read before the watch is recorded: not dropped."""
        hints = InotifyHints(threading.Event())
        try:
            hints.start([str(tmp_path / "*" / "*.log")])
            woke = hints.handle_events(hints.trees[0], struct.pack(
                "iIII", 9999, IN_CREATE, 0, 8) + b"0.log\0\0\0")
            _dirty, rescan = hints.take()
        finally:
            hints.stop()

        assert woke
        assert rescan

    def test_an_overflow_makes_the_tree_polled_said_once(self, tmp_path: Path) -> None:
        _scratch(tmp_path, 2)
        overflows: list[int] = []
        hints = InotifyHints(threading.Event(), on_overflow=lambda: overflows.append(1))
        try:
            hints.start([str(tmp_path / "*" / "logs" / "*.out")])
            tree = hints.trees[0]
            event = struct.pack("iIII", -1, IN_Q_OVERFLOW, 0, 0)
            with capture_logs() as logs:
                hints.handle_events(tree, event)
                hints.handle_events(tree, event)
        finally:
            hints.stop()

        assert [1] == overflows
        assert 1 == sum(1 for e in logs if e["event"] == "inotify_overflow_polling")
        assert not hints.covers(str(tmp_path / "job0" / "logs"))
        assert not hints.all_covered

    def test_the_safety_net_polls_every_file_of_a_tree_that_is_not_covered(
            self, tmp_path: Path) -> None:
        _scratch(tmp_path, 2)
        hints = InotifyHints(threading.Event())
        try:
            hints.start([str(tmp_path / "*" / "logs" / "*.out")])

            class T:
                def __init__(self, path: str) -> None:
                    self.path = path

            tailers = {p: T(p) for p in (str(tmp_path / f"job{j}" / "logs" / "rank0.out")
                                         for j in range(2))}
            net = SafetyNet[T](hints, poll_interval=1.0, interval=60.0)
            first = net.due(tailers, 1)  # one covered file per pass, never seen: checked
            again = [net.due(tailers, 1) for _ in range(2)]  # unchanged: skipped
            hints.handle_events(hints.trees[0], struct.pack("iIII", -1, IN_Q_OVERFLOW, 0, 0))
            polled = net.due(tailers, 1)
        finally:
            hints.stop()

        other = next(t for t in tailers.values() if t is not first[0])
        assert 1 == len(first)
        assert [[other], []] == again  # the next slice; then a quiet file is skipped
        assert set(tailers.values()) == set(polled)


class TestUnmatchedGlobs:
    def test_a_glob_matching_nothing_is_named(self, tmp_path: Path) -> None:
        (tmp_path / "a.log").write_text("x\n")
        found = [str(tmp_path / "a.log")]

        assert [str(tmp_path / "*.out")] == unmatched_globs(
            [str(tmp_path / "*.log"), str(tmp_path / "*.out")], found)

    def test_it_is_logged_at_start_and_in_a_metric(self, tmp_path: Path) -> None:
        registry = CollectorRegistry()
        metrics = SelfMetrics(registry, "test")
        source = FileSource(sources=[SourceSpec("train", (str(tmp_path / "*.log"),), (),
                                                "beginning")],
                            clock=FakeClock(), options=TailOptions(), metrics=metrics)
        with capture_logs() as logs:
            source.start(None, first_start=True)

        assert 1.0 == registry.get_sample_value("sigwatch_globs_unmatched",
                                                {"source": "train"})
        assert any(e["event"] == "glob_matches_nothing" for e in logs)
