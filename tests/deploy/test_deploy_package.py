"""The .deb from ``./dev.sh package``, installed into a clean Debian root made with mmdebstrap.

The root is the machine's Debian release with python3 only (what the package depends on); the
package is installed with the root's own dpkg (``chroot ROOT dpkg -i``), so its maintainer
scripts run there and nothing of the machine's packages is touched. The installed binary then
checks the shipped config and scans logs. Skips, saying why, without root, dpkg-deb or a
reachable Debian mirror.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.rootfs import unpack

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FAILURE = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"
POD_LOG = (b"2024-11-20T10:02:11.000000001Z stderr P RuntimeError: CUDA error: an illegal "
           b"mem\n2024-11-20T10:02:11.000000002Z stderr F ory access was encountered\n")


def _in_root(root: Path, *argv: str, netns: bool = False,
             ) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` chrooted into ``root`` (in a private network namespace with its own
    loopback when ``netns``: check-config binds the configured port, which the machine may
    be using)."""
    cmd = ["chroot", str(root), *argv]
    if netns:
        cmd = ["unshare", "--net", "--", "sh", "-c",
               'ip link set lo up && exec "$@"', "sh", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300,
                          env={"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root"})


@pytest.fixture(name="root")
def _root(debian_rootfs: Path, tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("installing into a chroot needs root")
    root = unpack(debian_rootfs, tmp_path / "root")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)  # ~500 MB: not kept in pytest's last runs


def test_dev_sh_package_builds_the_wheel_and_the_deb(packaged: Path) -> None:
    """One command, both artefacts, and the package says what it needs."""
    [wheel] = packaged.glob("sigwatch-*-py3-none-any.whl")
    [deb] = packaged.glob("sigwatch_*.deb")
    fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Depends", "Version"],
                            capture_output=True, text=True, check=True).stdout

    assert wheel.name.split("-")[1] in fields
    assert "Package: sigwatch" in fields
    assert "Depends: python3." in fields
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    for path in ("./opt/sigwatch/bin/sigwatch", "./lib/systemd/system/sigwatch.service",
                 "./etc/sigwatch/sigwatch.toml", "./etc/logrotate.d/sigwatch",
                 "./usr/share/doc/sigwatch/deploy.md", "./usr/bin/sigwatch -> "):
        assert path in listing, path
    assert ".pyc" not in listing  # compiled on the machine, not carrying the build's paths
    with zipfile.ZipFile(wheel) as whl:  # a pip install gets them too, under share/sigwatch
        shared = {n.split("/data/", 1)[1] for n in whl.namelist() if ".data/data/" in n}
    assert {"share/sigwatch/sigwatch.service", "share/sigwatch/sigwatch.toml",
            "share/sigwatch/logrotate", "share/sigwatch/deploy.md"} == shared


def test_the_deb_installs_in_a_clean_root_and_its_binary_runs(packaged: Path,
                                                              root: Path) -> None:
    """dpkg -i in a fresh Debian; then --version, check-config of the shipped config, scan of
    a plain log and of a Kubernetes pod log, a kept local edit across a reinstall, and a
    removal that leaves no /opt/sigwatch behind."""
    [deb] = packaged.glob("sigwatch_*.deb")
    shutil.copy(deb, root / "tmp" / deb.name)
    (root / "tmp" / "train.log").write_bytes(b"step 1 loss 2.0\n" + FAILURE)
    (root / "tmp" / "pod.log").write_bytes(POD_LOG)

    installed = _in_root(root, "dpkg", "-i", f"/tmp/{deb.name}")
    assert 0 == installed.returncode, installed.stdout + installed.stderr

    version = _in_root(root, "sigwatch", "--version")  # /usr/bin/sigwatch -> the venv
    assert (0, "sigwatch 0.1.0") == (version.returncode, version.stdout.strip()), version.stderr
    checked = _in_root(root, "/opt/sigwatch/bin/sigwatch", "check-config",
                       "/etc/sigwatch/sigwatch.toml", netns=True)
    assert 0 == checked.returncode, checked.stderr
    assert "/etc/sigwatch/sigwatch.toml: ok (1 sources," in checked.stdout
    for log in ("/tmp/train.log", "/tmp/pod.log"):
        scanned = _in_root(root, "/opt/sigwatch/bin/sigwatch", "scan", "--format", "json", log)
        found = [json.loads(line) for line in scanned.stdout.splitlines()]
        assert 1 == scanned.returncode, scanned.stderr
        assert ["cuda_illegal_memory_access"] == [d["signature"] for d in found], log
    unit = (root / "lib/systemd/system/sigwatch.service").read_text()
    documentation = next(line for line in unit.splitlines()
                         if line.startswith("Documentation="))
    assert (root / documentation.removeprefix("Documentation=file:///")).is_file()
    assert list((root / "opt/sigwatch/lib").rglob("__pycache__"))  # the postinst compiled
    conffiles = _in_root(root, "dpkg-query", "-W", "-f", "${Conffiles}", "sigwatch").stdout
    assert "/etc/sigwatch/sigwatch.toml" in conffiles
    assert "/etc/logrotate.d/sigwatch" in conffiles

    config = root / "etc/sigwatch/sigwatch.toml"
    config.write_text(config.read_text() + "# local edit\n")
    again = _in_root(root, "dpkg", "-i", f"/tmp/{deb.name}")
    assert 0 == again.returncode, again.stderr
    assert config.read_text().endswith("# local edit\n")

    removed = _in_root(root, "dpkg", "--purge", "sigwatch")
    assert 0 == removed.returncode, removed.stderr
    assert not (root / "opt/sigwatch").exists()
    assert not (root / "usr/bin/sigwatch").exists()
