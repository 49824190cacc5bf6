"""Kubernetes pod logs read as the program wrote them: the DaemonSet's config, scan, plain text.

Incident logs of the corpus (ranks prefixed by torchrun and srun, tracebacks, glog lines) are
written as the kubelet would write them through containerd: one CRI record per line,
``<RFC 3339 time> stderr F <line>``, with every line longer than 60 bytes split into 48-byte
partial (``P``) records first, and a stdout progress record between them now and then. Three
readers must find the same detections (signature, severity, line, rank, context, root cause):

- ``sigwatch scan`` of the plain-text original;
- ``sigwatch scan`` of the pod log (the format recognised: ``auto`` is the default);
- the daemon running the ConfigMap of ``deploy/kubernetes/sigwatch.yaml`` as shipped (only
  its paths, listener and state folder moved under the test's folder, and an event log
  added), with ``NODE_NAME`` set as the DaemonSet sets it, reading the pod's log at
  ``/var/log/pods/<ns>_<pod>_<uid>/<container>/0.log``, made after the daemon started.

One pod log per daemon: the root-cause correlator links detections of every file of a source
that arrive within a signature's window (by design for the ranks of one job), so unrelated pod
logs read in the same second would name each other's failures as causes.

Detections of the detectors beyond signatures are left out: ``scan`` runs them only with
``--detectors`` and they depend on time, which a replayed file does not have.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.daemon import DaemonProcess, free_port, wait_for, whole_jsonl

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
INCIDENTS = REPO / "tests" / "corpus" / "incidents"
LOGS = ["000_intel_pvc_page_fault.log", "001_rocm_aperture_violation.log",
        "002_jax_cudnn_execution_failed.log", "003_xla_gethandle_segfault.log"]
SPLIT_OVER, PART = 60, 48


def cri(plain: bytes, day: int = 20) -> bytes:
    """The pod log the kubelet writes for a program printing ``plain`` on stderr."""
    out = []
    nanos = 0

    def record(stream: str, tag: str, part: bytes) -> None:
        nonlocal nanos
        nanos += 1
        out.append(b"2024-11-%02dT10:02:%02d.%09dZ %s %s %s\n" % (
            day, nanos // 1000 % 60, nanos, stream.encode(), tag.encode(), part))

    for n, line in enumerate(plain.splitlines()):
        while len(line) > SPLIT_OVER:
            record("stderr", "P", line[:PART])
            line = line[PART:]
            if n % 3 == 0:  # stdout keeps writing while stderr's line is half written
                record("stdout", "F", b"")
        record("stderr", "F", line)
    return b"".join(out)


def _scan(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "sigwatch", "scan", "--format", "json",
                           str(path)], capture_output=True, text=True, check=False,
                          timeout=300)
    assert done.returncode in (0, 1), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def _library() -> set[str]:
    from sigwatch.patterns.loader import builtin_pattern_dir, load_patterns

    patterns, _ = load_patterns([builtin_pattern_dir()])
    return {s.id for s in patterns.signatures}


def _comparable(found: list[dict[str, Any]], library: set[str]) -> list[tuple[Any, ...]]:
    """What a reader must agree on, per log, in order (not where in the file, not when).

    The daemon folds repeats of a signature into the open incident (docs/fleet.md): a repeat's
    event-log record has what differs per occurrence (signature, line, rank) and names its
    incident, whose first record has the rest. So every occurrence is compared on those, and
    each incident's first record (``_firsts``) on everything.
    """
    return [(d["signature"], d["text"], d["rank"]) for d in found
            if d["signature"] in library]


def _firsts(found: list[dict[str, Any]], library: set[str],
            like: list[dict[str, Any]] | None = None) -> list[tuple[Any, ...]]:
    """The full comparison of the first record of each signature (of each incident in
    ``like``, the daemon's event log, when given: the same occurrences of the scan)."""
    wanted = None
    if like is not None:
        wanted = [(d["signature"], d["text"], d["rank"]) for d in like
                  if d["signature"] in library and not d.get("incident")]
    out = []
    for d in found:
        key = (d["signature"], d["text"], d["rank"])
        if d["signature"] not in library or d.get("incident"):
            continue
        if wanted is not None:
            if key not in wanted:
                continue
            wanted.remove(key)
        out.append((*key, d["severity"], tuple(d["context"]),
                    (d["root_cause"] or {}).get("signature"),
                    (d["root_cause"] or {}).get("text")))
    return out


def _shipped_config(tmp_path: Path, port: int) -> str:
    """The DaemonSet's ConfigMap, with its host paths and listener moved into ``tmp_path``."""
    docs = yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "sigwatch.yaml").read_text())
    [configmap] = [d for d in docs if d and d["kind"] == "ConfigMap"]
    text: str = configmap["data"]["sigwatch.toml"]
    moves = {'"/var/log/pods/*/*/*.log"': f'"{tmp_path}/var/log/pods/*/*/*.log"',
             'state_dir = "/var/lib/sigwatch"': (f'state_dir = "{tmp_path}/state"\n'
                                                 f'events = "{tmp_path}/events.jsonl"'),
             'listen = ":9750"': f'listen = "127.0.0.1:{port}"'}
    for old, new in moves.items():
        assert old in text, f"the shipped ConfigMap no longer has {old}: update this test"
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("name", LOGS)
def test_a_pod_log_gives_the_detections_of_the_plain_text_it_carries(tmp_path: Path,
                                                                    name: str) -> None:
    library = _library()
    plain = (INCIDENTS / name).read_bytes()
    original = tmp_path / name
    original.write_bytes(plain)
    pod_log = cri(plain)
    pod = tmp_path / "pod.log"
    pod.write_bytes(pod_log)
    expected = _comparable(_scan(original), library)
    assert expected, f"{name}: the plain text gives no detection"
    assert b" stderr P " in pod_log
    assert b" stdout F " in pod_log

    assert expected == _comparable(_scan(pod), library), "scan of the pod log"
    assert _firsts(_scan(original), library) == _firsts(_scan(pod), library)

    port = free_port()
    config = tmp_path / "sigwatch.toml"
    config.write_text(_shipped_config(tmp_path, port))
    daemon = DaemonProcess(["--config", str(config)], tmp_path / "daemon.log",
                           env={"NODE_NAME": "gpu-node-17"})
    events = tmp_path / "events.jsonl"

    def read() -> list[dict[str, Any]]:
        return whole_jsonl(events)

    try:
        wait_for(lambda: "sigwatch_ready" in daemon.stderr(), timeout=120, what="ready")
        # Made after the start, as a new pod's log is: read from its first byte.
        target = tmp_path / "var/log/pods/train_job-7_0e2f/trainer/0.log"
        target.parent.mkdir(parents=True)
        target.write_bytes(pod_log)
        deadline = time.monotonic() + 180
        while len(_comparable(read(), library)) < len(expected):
            assert time.monotonic() < deadline, (
                f"{len(read())} of {len(expected)} detections after 180 s; daemon log: "
                + daemon.stderr()[-3000:])
            time.sleep(0.1)
    finally:
        daemon.stop()

    found = read()
    assert expected == _comparable(found, library), "the daemon with the DaemonSet's config"
    assert _firsts(_scan(original), library, like=found) == _firsts(found, library), \
        "the full record of each incident"
    assert {"gpu-node-17"} == {d["host"] for d in found if not d.get("incident")}
