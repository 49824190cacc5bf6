"""The container image: deploy/container/Containerfile built with podman and run.

No registry is reachable from the test machines, so the base is made here from Debian's own
packages (mmdebstrap, the machine's release, then ``podman import``) and passed as ``BASE``;
the wheel comes from ``./dev.sh package``. The image is built, then runs ``--version``,
``check-config`` of the config it ships, ``scan`` of a plain log on stdin and of a Kubernetes
pod log mounted read-only (container format recognised), as its non-root user, and as the
daemon it stops cleanly on SIGTERM (``podman stop``: exit 0, not killed). Images and
containers are removed at the end (about 1 GB at the peak).

Podman on these machines needs two settings (``containers.conf`` via ``CONTAINERS_CONF``): the
``runc`` runtime (crun refuses the hybrid cgroup set-up) and default ulimits within the hard
limits; pip in the build verifies TLS with the machine's CA bundle (mounted, ``PIP_CERT``).
Skips, saying exactly why, without root, podman, a Debian mirror or a working container run.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.debian import require

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = """\
[engine]
runtime = "runc"
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
"""
FAILURE = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"
POD_LOG = (b"2024-11-20T10:02:11.000000001Z stderr P RuntimeError: CUDA error: an illegal "
           b"mem\n2024-11-20T10:02:11.000000002Z stderr F ory access was encountered\n")


class Podman:
    """podman with this test's containers.conf; every image and container it made is removed
    by ``cleanup``."""

    def __init__(self, binary: str, conf: Path) -> None:
        self.binary = binary
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}
        self.images: list[str] = []
        self.containers: list[str] = []

    def __call__(self, *args: str, stdin: bytes | None = None, timeout: float = 900,
                 ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([self.binary, *args], input=stdin, capture_output=True,
                              env=self.env, check=False, timeout=timeout)

    def ok(self, *args: str, **kw: object) -> str:
        done = self(*args, **kw)  # type: ignore[arg-type]
        assert 0 == done.returncode, (args, done.stderr.decode(errors="replace")[-3000:])
        return done.stdout.decode().strip()

    def cleanup(self) -> None:
        for cid in self.containers:
            self("rm", "-f", cid, timeout=120)
        for image in reversed(self.images):
            self("rmi", "-f", image, timeout=300)


@pytest.fixture(name="podman", scope="module")
def _podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    if os.geteuid() != 0:
        pytest.skip("building and running images here needs root (rootless podman is not "
                    "set up on these machines)")
    binary = require("podman")
    require("runc")
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    p = Podman(binary, conf)
    try:
        yield p
    finally:
        p.cleanup()


@pytest.fixture(name="base", scope="module")
def _base(podman: Podman, debian_rootfs: Path) -> str:
    """The Debian root imported as an image; skip if a container cannot run here at all."""
    name = f"localhost/sigwatch-test-base:{uuid.uuid4().hex[:12]}"
    imported = podman("import", "--quiet", str(debian_rootfs), name)
    if imported.returncode != 0:
        pytest.skip(f"podman import failed: {imported.stderr.decode(errors='replace')[-500:]}")
    podman.images.append(name)
    trial = podman("run", "--rm", "--network", "none", name, "true", timeout=300)
    if trial.returncode != 0:
        pytest.skip("podman cannot run a container on this machine: "
                    f"{trial.stderr.decode(errors='replace')[-500:]}")
    return name


def _ca_bundle() -> str | None:
    """The machine's CA bundle (a TLS-intercepting proxy's CA is in it, not in pip's)."""
    for candidate in (os.environ.get("SSL_CERT_FILE"), ssl.get_default_verify_paths().cafile,
                      "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


@pytest.fixture(name="image", scope="module")
def _image(podman: Podman, base: str, packaged: Path,
           tmp_path_factory: pytest.TempPathFactory) -> str:
    """The image built from the Containerfile, with the wheel of ./dev.sh package."""
    context = tmp_path_factory.mktemp("context")
    (context / "dist").mkdir(parents=True)
    [wheel] = packaged.glob("sigwatch-*.whl")
    shutil.copy(wheel, context / "dist" / wheel.name)
    (context / "deploy").mkdir()
    shutil.copy(REPO / "deploy" / "sigwatch.toml", context / "deploy" / "sigwatch.toml")
    name = f"localhost/sigwatch-test:{uuid.uuid4().hex[:12]}"
    args = ["build", "--quiet", "--pull=never", "--layers=false",
            "-f", str(REPO / "deploy" / "container" / "Containerfile"),
            "--build-arg", f"BASE={base}", "-t", name]
    ca = _ca_bundle()
    if ca:
        args += ["-v", f"{ca}:/run/host-ca.crt:ro", "--build-arg", "PIP_CERT=/run/host-ca.crt"]
    built = podman(*args, str(context), timeout=1800)
    podman.images.append(name)
    if built.returncode != 0:
        err = built.stderr.decode(errors="replace")
        if "Could not find a version" in err or "Failed to establish" in err:
            pytest.skip(f"pip in the build cannot reach a package index: {err[-500:]}")
        pytest.fail(f"podman build failed: {err[-3000:]}")
    return name


def test_the_image_runs_version_check_config_and_scan(podman: Podman, image: str,
                                                      tmp_path: Path) -> None:
    """The shipped image: its binary, its config, and detections from a scan inside it."""
    assert "sigwatch 0.1.0" == podman.ok("run", "--rm", "--network", "none", image,
                                         "--version")
    assert "65532" == podman.ok("run", "--rm", "--network", "none", "--entrypoint", "id",
                                image, "-u")  # not root
    assert "ok (1 sources, " in podman.ok("run", "--rm", "--network", "none", image,
                                          "check-config", "/etc/sigwatch/sigwatch.toml")

    plain = podman("run", "--rm", "-i", "--network", "none", image, "scan", "--format",
                   "json", "-", stdin=b"step 1 loss 2.0\n" + FAILURE)
    pod_log = tmp_path / "0.log"
    pod_log.write_bytes(POD_LOG)
    pod_log.chmod(0o644)
    pod = podman("run", "--rm", "--network", "none", "-v", f"{pod_log}:/logs/0.log:ro",
                 image, "scan", "--format", "json", "/logs/0.log")

    for done in (plain, pod):
        found = [json.loads(line) for line in done.stdout.decode().splitlines()]
        assert 1 == done.returncode, done.stderr.decode(errors="replace")
        assert ["cuda_illegal_memory_access"] == [d["signature"] for d in found]
        assert FAILURE.decode().strip() == found[0]["text"]


def test_the_daemon_in_the_image_stops_cleanly_on_sigterm(podman: Podman, image: str) -> None:
    """PID 1 in the container is sigwatch: `podman stop` ends it with status 0."""
    cid = podman.ok("run", "-d", "--network", "none", image, "run", "--watch",
                    "/tmp/*.log", "--state-dir", "/var/lib/sigwatch", "--no-console")
    podman.containers.append(cid)
    deadline = time.monotonic() + 120
    while b"sigwatch_ready" not in podman("logs", cid).stderr:
        assert time.monotonic() < deadline, podman("logs", cid).stderr.decode()[-2000:]
        time.sleep(0.2)

    podman.ok("stop", "--time", "60", cid)

    assert "0" == podman.ok("inspect", cid, "--format", "{{.State.ExitCode}}")
