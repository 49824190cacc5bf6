"""Plant faults in the file source, the pipeline and the committer; the suite must catch each.

Each mutation is a one-place text change in a copy of ``daemon/`` (the anchor must occur exactly
once, so the script fails loudly when the code moves on). For each, the reliability tests (or
the tests the mutation names) run against the mutated copy; a mutation is *caught* when they
fail. Run with ``./dev.sh mutations`` (a few minutes; ``./dev.sh mutations WORD`` plants only
the faults whose name holds WORD); prints one row per fault and exits non-zero if any survives.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RELIABILITY = ("tests/reliability",)
OPTIONS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    anchor: str
    replacement: str
    slow: bool = False  # only the slow (model, chaos) tests can see it
    tests: tuple[str, ...] = RELIABILITY  # where the tests that must catch it are


MUTATIONS = [
    Mutation("skip the first read after a truncation", "sigwatch/sources/file.py",
             "        self.offset = 0\n        self.emitted = -1\n",
             "        self.offset = self.size()\n        self.emitted = -1\n"),
    Mutation("commit before the event log is flushed", "sigwatch/sinks/eventlog.py",
             '        """Write, fsync, then describe the file; raises OSError while records wait."""\n'
             "        self.flush()\n",
             '        """Write, fsync, then describe the file; raises OSError while records wait."""\n'),
    Mutation("forget the offset marker (rewrite in place unseen)", "sigwatch/sources/file.py",
             "return size < self.size_before or not self.marker_intact()",
             "return size < self.size_before"),
    Mutation("off by one on resume", "sigwatch/sources/files.py",
             "return Resume(record.offset, record.lineno,",
             "return Resume(record.offset + 1, record.lineno,"),
    Mutation("held detections not recorded as pending", "sigwatch/sources/files.py",
             "pending = tuple(sorted(set(need.held) | {p for p in stream.pending "
             "if p >= committed}))",
             "pending = ()"),
    Mutation("replay re-delivers what was delivered before a crash", "sigwatch/pipeline.py",
             "and d.offset not in stream.pending):",
             "and d.offset not in stream.pending and False):"),
    Mutation("a pending line of the generic layer also re-delivers a signature's detection",
             "sigwatch/pipeline.py",
             'if mine and getattr(det, "held_gives_way", False):',
             "if False:"),
    Mutation("event log not rolled back to the commit", "sigwatch/sinks/eventlog.py",
             "        if commit is None:\n            return 0\n",
             "        if commit is None or True:\n            return 0\n"),
    Mutation("head fingerprint ignored (inode reuse taken for the old file)",
             "sigwatch/sources/files.py",
             "if record.head_len and _hash_head(fd, record.head_len) != record.head_hash:",
             "if False:"),
    Mutation("rotated file not drained after rotation", "sigwatch/sources/file.py",
             "self.draining.append(Draining(stream, now + self._rotate_wait))",
             "stream.close()"),
    Mutation("replay floor ignored (open sequence forgotten at a crash)",
             "sigwatch/sources/files.py",
             "if need.position is not None and need.lineno is not None "
             "and need.position < committed:",
             "if False:"),
    # Issue 25: each passed every test before, and each loses a user something.
    Mutation("journal: entries printed just before journalctl ends are skipped at its restart",
             "sigwatch/sources/journal.py",
             "        self._last_cursor_seen = self.cursor\n",
             "        self.cursor = self._last_cursor_seen\n",
             tests=("tests/unit/test_source_journal.py",
                    "tests/reliability/test_model_journal_kmsg.py")),
    Mutation("event log not fsynced before the checkpoint commits it",
             "sigwatch/sinks/eventlog.py",
             "        if self._fsync and self._unsynced:\n            os.fsync(self._fd)\n",
             "        if False:\n            os.fsync(self._fd)\n"),
    Mutation("event log written in 512-byte slices (readers see torn records)",
             "sigwatch/sinks/eventlog.py",
             "written = os.write(self._fd, self._pending)",
             "written = os.write(self._fd, self._pending[:512])"),
    Mutation("exec stops as soon as its command exits (workers' output still flushing)",
             "sigwatch/execute.py",
             "            if all(s.ended for s in sources):\n",
             "            if True:\n",
             tests=("tests/integration/test_exec.py",)),
    Mutation("checkpoint keeps no previous generation", "sigwatch/runtime/checkpoint.py",
             "            os.replace(self.path, self.prev)\n",
             "            pass\n"),
    Mutation("Alertmanager queue saved only on a clean stop", "sigwatch/sinks/alertmanager.py",
             "        if self._dirty:\n            self._save()\n"
             "        for replica in self._replicas:\n"
             "            if self._due(replica, now):\n"
             "                self._post(replica, now)\n"
             "        self._update_gauges()\n"
             "        if self._dirty:\n            self._save()\n",
             "        for replica in self._replicas:\n"
             "            if self._due(replica, now):\n"
             "                self._post(replica, now)\n"
             "        self._update_gauges()\n"),
    Mutation("step-time regression flag not restored (a restart pages the slowdown again)",
             "sigwatch/detectors/training.py",
             'raw.get("run_step"), bool(raw["regressed"]),',
             'raw.get("run_step"), False,'),
]


def _args(paths: tuple[str, ...], *, slow: bool) -> list[str]:
    return [*paths, *OPTIONS] if slow else [*paths, "-m", "not slow", *OPTIONS]


def _run(daemon_dir: Path, args: list[str]) -> tuple[bool, float]:
    env = dict(os.environ, PYTHONPATH=f"{daemon_dir}{os.pathsep}{REPO / 'tests'}")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=REPO, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return proc.returncode == 0, time.monotonic() - started


def check_anchors() -> list[str]:
    """Mutations whose anchor no longer occurs exactly once (the script would be stale)."""
    stale = []
    for m in MUTATIONS:
        text = (REPO / "daemon" / m.file).read_text(encoding="utf-8")
        if text.count(m.anchor) != 1:
            stale.append(m.name)
    return stale


def main() -> int:
    only = sys.argv[1] if len(sys.argv) > 1 else ""  # run the faults whose name has this
    stale = check_anchors()
    if stale:
        print(f"stale anchors: {stale}", file=sys.stderr)
        return 2
    chosen = [m for m in MUTATIONS if only.lower() in m.name.lower()]
    every = tuple(dict.fromkeys(p for m in chosen for p in m.tests))
    ok, seconds = _run(REPO / "daemon", _args(every, slow=False))
    if not ok:
        print("the unmutated suite fails; fix that first", file=sys.stderr)
        return 2
    print(f"unmutated: pass ({seconds:.0f} s)\n")
    print("| planted fault | caught by | seconds |")
    print("|---|---|---:|")
    survived = 0
    for m in chosen:
        with tempfile.TemporaryDirectory(prefix="sigwatch-mutant-") as tmp:
            copy = Path(tmp) / "daemon"
            shutil.copytree(REPO / "daemon", copy,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            target = copy / m.file
            target.write_text(target.read_text(encoding="utf-8").replace(
                m.anchor, m.replacement), encoding="utf-8")
            where = ", ".join(m.tests)
            passed, seconds = _run(copy, _args(m.tests, slow=False))
            caught_by = "" if passed else f"fast tests ({where})"
            if passed:
                passed, more = _run(copy, _args(m.tests, slow=True))
                seconds += more
                caught_by = "" if passed else f"slow tests ({where})"
        survived += passed
        print(f"| {m.name} | {caught_by or 'SURVIVED'} | {seconds:.0f} |", flush=True)
    print(f"\n{len(chosen) - survived} of {len(chosen)} planted faults caught")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
