"""Code health is part of the test command: lint, strict types, and the layers' import rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False,
                          timeout=600)


@pytest.mark.integration
def test_ruff_finds_nothing_with_the_broad_rule_set() -> None:
    result = _run(str(BIN / "ruff"), "check", "daemon", "tests", "bench", "deploy",
                  "--output-format",
                  "concise")
    assert 0 == result.returncode, result.stdout + result.stderr


@pytest.mark.integration
def test_mypy_strict_is_clean_on_the_package() -> None:
    result = _run(str(BIN / "mypy"))  # strict, packages: pyproject.toml [tool.mypy]
    assert 0 == result.returncode, result.stdout + result.stderr


@pytest.mark.integration
def test_sources_detectors_and_sinks_keep_to_their_layers() -> None:
    result = _run(str(BIN / "lint-imports"))
    assert 0 == result.returncode, result.stdout + result.stderr


def test_the_package_says_it_is_typed() -> None:
    assert (REPO / "daemon" / "sigwatch" / "py.typed").exists()
