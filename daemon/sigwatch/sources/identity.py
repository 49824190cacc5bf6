"""Which job a stream belongs to, and its rank: from its path, or from a launcher's environment.

Three places say it, and the first that does wins:

- ``labels_from_path`` on a ``[[sources]]`` entry: a regex with the named group ``job`` (and
  optionally ``rank``, ``namespace``, ``pod``), searched in the path of each stream. Compiled
  once at load; a bad regex, a missing ``job`` group or an unknown group is a config error.
- A CRI pod log path, ``/var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log`` (and the
  ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log`` links to it): the namespace
  and the pod, and the job is the pod's name without its replica suffix (``-worker-3``,
  ``-master-0``, an indexed Job's ``-3-x7k2p``, a trailing ``-3``), under its namespace:
  every pod of one training job then shares the job.
- ``sigwatch exec``: the environment the launcher gives each rank (Slurm, torchrun, MPI, an
  indexed Kubernetes Job or the downward API), or ``SIGWATCH_JOB``/``SIGWATCH_RANK``.

A rank printed on a line (``[rank3]:``) is more specific than any of these and wins over them
(the pipeline decides that per line).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "LABEL_GROUPS",
    "JobIdentity",
    "PathLabels",
    "PathLabelsError",
    "cri_identity",
    "environment_identity",
    "identify",
]

LABEL_GROUPS = ("job", "rank", "namespace", "pod")
"""Named groups ``labels_from_path`` may have (``job`` is required)."""

MAX_LABEL_CHARS = 128
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")

# /var/log/pods/<namespace>_<pod>_<uid>/<container>/<n>.log (kubelet's layout, every CRI runtime)
_CRI_POD = re.compile(
    r"/pods/(?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)_(?P<pod>[a-z0-9]([-.a-z0-9]*[a-z0-9])?)"
    r"_[0-9a-fA-F-]{8,}/[^/]+/\d+\.log(?:\.\d+|\.gz|\.\d{8}-\d{6}(?:\.gz)?)?$")
# /var/log/containers/<pod>_<namespace>_<container>-<64 hex>.log
_CRI_CONTAINER = re.compile(
    r"/containers/(?P<pod>[a-z0-9]([-.a-z0-9]*[a-z0-9])?)_(?P<namespace>[a-z0-9]([-a-z0-9]*"
    r"[a-z0-9])?)_[^/]+-[0-9a-f]{64}\.log$")
# The replica part of a pod's name, most specific first: a training operator's role and index
# (Kubeflow, Volcano, MPI operator), an indexed Job's index and hash, a Job pod's hash, a
# StatefulSet's index. Kubernetes' generated suffixes use an alphabet without vowels, so a
# name such as "llama-train" keeps its last word.
_HASH = "[bcdfghjklmnpqrstvwxz2456789]{5}"
_REPLICA = (
    re.compile(r"-(?:master|worker|launcher|trainer|leader|chief|ps|evaluator)-\d+$"),
    re.compile(rf"-\d+-{_HASH}$"),
    re.compile(rf"-{_HASH}$"),
    re.compile(r"-\d+$"),
)


class PathLabelsError(ValueError):
    """``labels_from_path`` is unusable: the reason names what is wrong with it."""


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """A stream's job and rank where known, and the pod it runs in (Kubernetes)."""

    job: str = ""
    rank: str | None = None
    namespace: str = ""
    pod: str = ""

    def labels(self) -> tuple[tuple[str, str], ...]:
        return tuple((k, v) for k, v in (("namespace", self.namespace), ("pod", self.pod)) if v)

    def __bool__(self) -> bool:
        return bool(self.job or self.rank is not None or self.namespace or self.pod)


def _clean(value: str | None) -> str:
    """A label value: control characters removed, length bounded."""
    if not value:
        return ""
    return _UNSAFE.sub("", value)[:MAX_LABEL_CHARS]


class PathLabels:
    """``labels_from_path`` compiled: ``identify(path)`` is its groups, or None."""

    def __init__(self, pattern: str) -> None:
        try:
            self.regex = re.compile(pattern)
        except re.error as exc:
            raise PathLabelsError(f"not a valid regular expression: {exc}") from None
        groups = set(self.regex.groupindex)
        if "job" not in groups:
            raise PathLabelsError("needs a named group 'job', as in "
                                  "'/var/log/training/(?P<job>[^/]+)/rank(?P<rank>\\d+)\\.log$'")
        unknown = sorted(groups - set(LABEL_GROUPS))
        if unknown:
            raise PathLabelsError(f"unknown named group(s) {', '.join(unknown)}; "
                                  f"allowed: {', '.join(LABEL_GROUPS)}")
        self.pattern = pattern

    def identify(self, path: str) -> JobIdentity | None:
        m = self.regex.search(path)
        if m is None:
            return None
        found = m.groupdict()
        job = _clean(found.get("job"))
        if not job:
            return None
        rank = _clean(found.get("rank")) or None
        return JobIdentity(job, rank, _clean(found.get("namespace")), _clean(found.get("pod")))


def job_of_pod(pod: str) -> str:
    """The pod's name without its replica suffix: what every pod of one job shares."""
    for suffix in _REPLICA:
        base = suffix.sub("", pod)
        if base and base != pod:
            return base
    return pod


def cri_identity(path: str) -> JobIdentity | None:
    """Namespace, pod and job of a kubelet pod log path (None for any other path)."""
    m = _CRI_POD.search(path) or _CRI_CONTAINER.search(path)
    if m is None:
        return None
    namespace, pod = m.group("namespace"), m.group("pod")
    return JobIdentity(_clean(f"{namespace}/{job_of_pod(pod)}"), None, namespace, pod)


def identify(path: str, labels: PathLabels | None) -> JobIdentity | None:
    """A stream's identity from its path: ``labels_from_path`` first, then the CRI layout."""
    if labels is not None:
        found = labels.identify(path)
        if found is not None:
            cri = cri_identity(path)
            if cri is not None and not (found.namespace or found.pod):
                found = JobIdentity(found.job, found.rank, cri.namespace, cri.pod)
            return found
    return cri_identity(path)


_JOB_VARIABLES = ("SIGWATCH_JOB", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
_RANK_VARIABLES = ("SIGWATCH_RANK", "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                   "PMIX_RANK", "JOB_COMPLETION_INDEX")


def environment_identity(env: Mapping[str, str]) -> JobIdentity:
    """The job and rank a launcher gave this process.

    Job: ``SIGWATCH_JOB``, Slurm's ``SLURM_JOB_ID``, torchrun's ``TORCHELASTIC_RUN_ID``, else
    the Kubernetes downward API's ``JOB_NAME`` (under ``POD_NAMESPACE`` when set). Rank:
    ``SIGWATCH_RANK``, torchrun's ``RANK``, Slurm's ``SLURM_PROCID``, Open MPI's
    ``OMPI_COMM_WORLD_RANK``, MPICH/PMIx ``PMI_RANK``/``PMIX_RANK``, an indexed Job's
    ``JOB_COMPLETION_INDEX``. ``POD_NAME``/``POD_NAMESPACE`` are kept as the pod.
    """
    job = next((_clean(env[v]) for v in _JOB_VARIABLES if _clean(env.get(v))), "")
    namespace = _clean(env.get("POD_NAMESPACE"))
    if not job and _clean(env.get("JOB_NAME")):
        name = _clean(env.get("JOB_NAME"))
        job = f"{namespace}/{name}" if namespace else name
    rank = next((_clean(env[v]) for v in _RANK_VARIABLES
                 if _clean(env.get(v)).isdigit()), None)
    return JobIdentity(job, rank, namespace, _clean(env.get("POD_NAME")))
