"""A clean Debian root for install tests, made with mmdebstrap from the machine's apt sources.

``debian_rootfs_tar(folder)`` builds ``rootfs.tar`` once (``mmdebstrap --variant=apt``, the
machine's release, with python3, python3-venv and ca-certificates: what the .deb depends on and
what a container base needs), about 210 MB and one to two minutes. ``SIGWATCH_TEST_ROOTFS=FILE``
reuses a tar made earlier the same way. Skips, saying why, when this is not root or mmdebstrap
cannot be installed or cannot reach the Debian mirror.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from support.debian import require

__all__ = ["PACKAGES", "debian_rootfs_tar", "release", "unpack"]

PACKAGES = ("python3", "python3-venv", "ca-certificates")


def release() -> str:
    """The machine's Debian codename (``bookworm``), from /etc/os-release."""
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    pytest.skip("/etc/os-release names no VERSION_CODENAME: not a Debian release")


def debian_rootfs_tar(folder: Path) -> Path:
    """The tar of a minimal Debian root (built into ``folder``, or ``$SIGWATCH_TEST_ROOTFS``)."""
    given = os.environ.get("SIGWATCH_TEST_ROOTFS")
    if given:
        if not tarfile.is_tarfile(given):
            pytest.fail(f"SIGWATCH_TEST_ROOTFS={given} is not a tar file")
        return Path(given)
    if os.geteuid() != 0:
        pytest.skip("making a Debian root with mmdebstrap needs root")
    tool = require("mmdebstrap")
    out = folder / "rootfs.tar"
    done = subprocess.run(
        [tool, "--quiet", "--variant=apt", f"--include={','.join(PACKAGES)}", "--format=tar",
         release(), str(out)],
        capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        tail = " / ".join(done.stderr.strip().splitlines()[-3:])
        pytest.skip(f"mmdebstrap could not make a Debian root (no mirror reachable?): {tail}")
    return out


def unpack(tar: Path, root: Path) -> Path:
    """Unpack the root into ``root`` (owners and modes kept: run as root)."""
    root.mkdir(parents=True)
    subprocess.run(["tar", "-xpf", str(tar), "-C", str(root)], check=True, timeout=600)
    return root
