"""Debian tools the deployment tests run for real: installed by the test when missing.

``require("promtool")`` returns the tool's path, installing its Debian package with apt-get
first when the tool is not on PATH (the test command runs on fresh Debian machines as root).
When it cannot be installed (not root, no apt-get, no network) the test is skipped with the
reason, so a developer laptop without the packages still runs everything else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

import pytest

__all__ = ["PACKAGES", "require"]

# Tool -> Debian package that ships it (bookworm).
PACKAGES = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
    "systemd-analyze": "systemd",
    "logrotate": "logrotate",
    "mmdebstrap": "mmdebstrap",
    "dpkg-deb": "dpkg",
    "podman": "podman",
    "runc": "runc",
}

_lock = threading.Lock()
_updated = False
_failed: dict[str, str] = {}


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Others may run apt at the same time: wait for the lock rather than fail.
    return subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", *args],
                          capture_output=True, text=True, env=env, check=False, timeout=900)


def _install(package: str) -> str | None:
    """Install ``package``; returns why not, or None on success."""
    global _updated  # noqa: PLW0603 - one apt-get update per test session
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return (f"{package} is not installed and this is not root on Debian "
                f"(apt-get install {package})")
    if not _updated:
        done = _apt("update", "-qq")
        if done.returncode != 0:
            return f"apt-get update failed: {done.stderr.strip()[-300:]}"
        _updated = True
    # policy-rc.d keeps the packaged services from starting in containers; on a real host they
    # would start on their default ports, which the tests never use.
    done = _apt("install", "-y", "-qq", "--no-install-recommends", package)
    if done.returncode != 0:
        return f"apt-get install {package} failed: {done.stderr.strip()[-300:]}"
    return None


def require(tool: str) -> str:
    """The path of ``tool``, installing its Debian package when missing (else skip the test)."""
    path = shutil.which(tool)
    if path:
        return path
    package = PACKAGES[tool]
    with _lock:
        if package not in _failed:
            why = _install(package)
            if why:
                _failed[package] = why
        why = _failed.get(package)
    path = shutil.which(tool)
    if path:
        return path
    pytest.skip(why or f"{tool} not found after installing {package}")
