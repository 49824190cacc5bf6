"""The on-disk cache of the library's analysis: used when it fits, harmless when it does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sigwatch.engine import cache
from sigwatch.engine.analysis import analyze
from sigwatch.engine.cache import analyze_all
from sigwatch.patterns.compiled import PatternSet

REPO = Path(__file__).resolve().parents[2]


def _sources(library: PatternSet) -> list[str]:
    return [step.source for sig in library.signatures for step in sig.steps]


class TestAnalysisCache:
    def test_second_start_reads_what_the_first_wrote(self, tmp_path: Path,
                                                     library: PatternSet) -> None:
        """The first run writes one file; the second returns the same filters from it."""
        sources = _sources(library)

        first = analyze_all(sources, directory=tmp_path)
        files = list(tmp_path.glob("analysis-*.json"))
        second = analyze_all(sources, directory=tmp_path)

        assert 1 == len(files)
        assert first == second
        assert {s: analyze(s) for s in sources} == second

    def test_another_library_gets_another_file(self, tmp_path: Path,
                                               library: PatternSet) -> None:
        """A changed pattern (a different set of regexes) never reads the old analysis."""
        sources = _sources(library)
        analyze_all(sources, directory=tmp_path)

        changed = analyze_all([*sources[1:], r"brand new \d+ failure"], directory=tmp_path)

        assert 2 == len(list(tmp_path.glob("analysis-*.json")))
        assert analyze(r"brand new \d+ failure") == changed[r"brand new \d+ failure"]

    @pytest.mark.parametrize("damage", [b"", b"{not json", b'{"version": 1, "steps": []}',
                                        b'{"version": 99}', b"[1, 2, 3]"],
                             ids=["empty", "truncated", "wrong-shape", "foreign", "list"])
    def test_a_corrupt_or_foreign_file_is_ignored_and_rebuilt(
            self, tmp_path: Path, library: PatternSet, damage: bytes) -> None:
        """Whatever is in the file, the filters are right and the file is good again."""
        sources = _sources(library)[:20]
        analyze_all(sources, directory=tmp_path)
        (path,) = tmp_path.glob("analysis-*.json")
        path.write_bytes(damage)

        again = analyze_all(sources, directory=tmp_path)

        assert {s: analyze(s) for s in sources} == again
        assert json.loads(path.read_bytes())["version"] == cache.CACHE_VERSION

    def test_a_wrong_entry_is_ignored(self, tmp_path: Path, library: PatternSet) -> None:
        """An entry of the wrong type makes the whole file unused, not a crash."""
        sources = _sources(library)[:5]
        analyze_all(sources, directory=tmp_path)
        (path,) = tmp_path.glob("analysis-*.json")
        raw = json.loads(path.read_bytes())
        raw["steps"][sources[0]] = [[[5, True]], 1.0, 7, None]
        path.write_text(json.dumps(raw))

        assert {s: analyze(s) for s in sources} == analyze_all(sources, directory=tmp_path)

    @pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
    def test_a_read_only_location_means_no_cache(self, tmp_path: Path,
                                                 library: PatternSet) -> None:
        """No error, the right filters, nothing written."""
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        sources = _sources(library)[:5]

        found = analyze_all(sources, directory=folder)

        assert {s: analyze(s) for s in sources} == found
        assert [] == list(folder.iterdir())

    def test_an_unusable_location_means_no_cache(self, tmp_path: Path,
                                                 library: PatternSet) -> None:
        """A location under a regular file cannot be created: no error, right filters."""
        blocker = tmp_path / "file"
        blocker.write_bytes(b"x")
        sources = _sources(library)[:5]

        assert {s: analyze(s) for s in sources} == analyze_all(
            sources, directory=blocker / "cache")

    def test_two_processes_at_once(self, tmp_path: Path) -> None:
        """Two scans starting together with an empty cache both succeed, and leave one good
        file and no temporary file behind."""
        env = dict(os.environ, SIGWATCH_CACHE_DIR=str(tmp_path / "cache"),
                   PYTHONPATH=str(REPO / "daemon"))
        log = tmp_path / "x.log"
        log.write_bytes(b"RuntimeError: CUDA error: an illegal memory access was encountered\n")
        cmd = [sys.executable, "-m", "sigwatch", "scan", "--format", "json", str(log)]
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE) for _ in range(2)]
        outs = [p.communicate(timeout=300)[0] for p in procs]

        assert [1, 1] == [p.returncode for p in procs]
        assert outs[0].count(b"\n") == outs[1].count(b"\n") >= 1
        assert 1 == len(list((tmp_path / "cache").glob("analysis-*.json")))
        assert [] == list((tmp_path / "cache").glob(".analysis-*"))

    def test_cache_can_be_turned_off(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """``SIGWATCH_CACHE_DIR=off``: no location at all."""
        monkeypatch.setenv("SIGWATCH_CACHE_DIR", "off")

        assert cache.cache_dir() is None


class TestScanStartUp:
    def test_scan_does_not_load_the_daemon(self, tmp_path: Path) -> None:
        """``scan`` imports neither the web server, nor the sources, nor the config models."""
        log = tmp_path / "x.log"
        log.write_bytes(b"step 1 loss 2.0\n")
        code = ("import sys; from sigwatch.cli import main; "
                f"status = main(['scan', {str(log)!r}]); "
                "print(sorted(m for m in sys.modules if m.startswith(('sigwatch.web', "
                "'sigwatch.sources.files', 'sigwatch.sources.watching', 'sigwatch.config', "
                "'sigwatch.inputs', 'sigwatch.runtime'))))")
        env = dict(os.environ, PYTHONPATH=str(REPO / "daemon"),
                   SIGWATCH_CACHE_DIR=str(tmp_path / "cache"))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True, timeout=300).stdout

        assert "[]" == out.strip().splitlines()[-1]
