"""The daemon configuration (TOML), validated strictly: unknown keys are errors."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from sigwatch.detectors.progress import Extractor
from sigwatch.errors import ConfigError, field_path
from sigwatch.faults.settings import PolicySettings, SlurmSettings
from sigwatch.sources.identity import PathLabels, PathLabelsError
from sigwatch.statedir import default_state_dir
from sigwatch.web.server import ListenAddressError, parse_listen
from sigwatch.web.settings import WebSettings

__all__ = ["DEFAULT_LISTEN", "DEFAULT_WATCH", "Config", "IncidentSettings", "JobSettings",
           "SourceConfig", "default_state_dir", "expand_env_reference", "load_config"]

DEFAULT_WATCH = "/var/log/training/**/*.log"
DEFAULT_LISTEN = "127.0.0.1:9750"


_ENV_REFERENCE = re.compile(
    r"^(?:\$\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}"
    r"|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*))$")


def expand_env_reference(value: str) -> str:
    """``$NAME``, ``${NAME}`` or ``${NAME:-default}``: the environment variable's value.

    Anything else is returned as it is. A reference to an unset (or empty) variable without a
    default is an error, so a DaemonSet that forgot ``NODE_NAME`` says so instead of labelling
    every detection with the pod's name.
    """
    m = _ENV_REFERENCE.match(value)
    if m is None:
        return value
    name = m.group("braced") or m.group("bare")
    found = os.environ.get(name, "")
    if found:
        return found
    if m.group("default") is not None:
        return m.group("default")
    msg = f"environment variable {name} is not set (referenced as {value!r})"
    raise ValueError(msg)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceConfig(_Strict):
    """A named input; the name is the ``source`` label.

    ``kind``: ``files`` (globs in ``paths``), ``journal`` (``units``/``identifiers`` filter;
    ``kernel`` for its kernel messages), ``kmsg`` (``/dev/kmsg``, or ``paths[0]``) or ``pipe``
    (named pipes in ``paths``). ``format`` reads file sources as container logs (CRI,
    Docker json-file). ``content`` says what a stream holds when its kind does not (a file
    that is ``/var/log/kern.log`` is ``kernel``), which decides the signatures that apply.
    """

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
    kind: Literal["files", "journal", "kmsg", "pipe"] = "files"
    paths: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    start_at: Literal["end", "beginning"] = "end"
    units: list[str] = Field(default_factory=list)
    identifiers: list[str] = Field(default_factory=list)
    kernel: bool = False
    format: Literal["auto", "cri", "docker", "plain"] | None = None
    content: Literal["job", "kernel", "mixed"] | None = None
    lookback_seconds: float | None = Field(default=None, ge=0)
    # A regex with the named group ``job`` (and optionally ``rank``, ``namespace``, ``pod``)
    # searched in each stream's path: the job and rank of its detections.
    labels_from_path: str | None = None

    @field_validator("labels_from_path")
    @classmethod
    def _path_labels(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                PathLabels(value)
            except PathLabelsError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _fits_kind(self) -> SourceConfig:
        if self.kind in ("files", "pipe") and not self.paths:
            msg = f"a {self.kind} source needs at least one entry in paths"
            raise ValueError(msg)
        if self.kind == "pipe" and len(self.paths) != 1:
            msg = "a pipe source reads one named pipe (one entry in paths)"
            raise ValueError(msg)
        if self.kind == "kmsg" and len(self.paths) > 1:
            msg = "a kmsg source reads one device (paths holds at most one)"
            raise ValueError(msg)
        if (self.units or self.identifiers or self.kernel) and self.kind != "journal":
            msg = "units, identifiers and kernel apply to journal sources only"
            raise ValueError(msg)
        if self.format is not None and self.kind != "files":
            msg = "format applies to files sources only"
            raise ValueError(msg)
        if self.labels_from_path is not None and self.kind not in ("files", "pipe"):
            msg = "labels_from_path applies to files and pipe sources only"
            raise ValueError(msg)
        return self

    def path_labels(self) -> PathLabels | None:
        """``labels_from_path`` compiled (validated at load, so it compiles)."""
        return PathLabels(self.labels_from_path) if self.labels_from_path else None


class NovelErrorSettings(_Strict):
    """``novel_error``: error lines whose template this node has never seen."""

    enabled: bool = True
    learn_lines: int = Field(default=2000, ge=0)
    learn_hours: float = Field(default=6.0, ge=0)
    max_per_hour: int = Field(default=20, ge=1)


class StepTimeSettings(_Strict):
    """``step_time_regression`` (and incident 004 on MI300/ROCm 6.3.0)."""

    enabled: bool = True
    ratio: float = Field(default=1.2, gt=1)
    sustain: int = Field(default=5, ge=1)
    warmup: int = Field(default=10, ge=0)


class StallSettings(_Strict):
    """``training_stalled``: progress lines stop for many times their usual interval."""

    enabled: bool = True
    factor: float = Field(default=10.0, gt=1)
    floor_seconds: float = Field(default=300.0, gt=0)


class BadNumbersSettings(_Strict):
    """``training_nonfinite`` and ``training_loss_scale_minimum``."""

    enabled: bool = True
    consecutive: int = Field(default=3, ge=1)
    min_loss_scale: float = Field(default=1.0, gt=0)


class BurstSettings(_Strict):
    """``burst``: a signature or template far above its own rate."""

    enabled: bool = True
    window_seconds: float = Field(default=60.0, gt=0)
    factor: float = Field(default=10.0, gt=1)
    min_count: int = Field(default=20, ge=1)


class GenericSettings(_Strict):
    """The generic layer: tracebacks, native crashes, error records, failed checks."""

    enabled: bool = True
    hold_seconds: float = Field(default=30.0, gt=0, le=3600)


class ExtractorConfig(_Strict):
    """A user progress extractor: a regex with named groups (step, time, loss, ...)."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")
    regex: str = Field(min_length=1)

    @field_validator("regex")
    @classmethod
    def _usable(cls, value: str) -> str:
        try:
            Extractor.user("check", value)
        except (ValueError, re.error) as exc:
            raise ValueError(str(exc)) from None
        return value


class DetectorSettings(_Strict):
    """Detectors beyond signatures; each can be turned off."""

    novel_error: NovelErrorSettings = Field(default_factory=NovelErrorSettings)
    step_time: StepTimeSettings = Field(default_factory=StepTimeSettings)
    stall: StallSettings = Field(default_factory=StallSettings)
    bad_numbers: BadNumbersSettings = Field(default_factory=BadNumbersSettings)
    burst: BurstSettings = Field(default_factory=BurstSettings)
    generic: GenericSettings = Field(default_factory=GenericSettings)
    extractors: list[ExtractorConfig] = Field(default_factory=list)


SeverityName = Literal["info", "warning", "error", "critical"]


def _paging_default() -> list[SeverityName]:
    return ["error", "critical"]


class AlertingSettings(_Strict):
    """Direct paging through Alertmanager (API v2); empty ``alertmanagers``: no paging."""

    alertmanagers: list[str] = Field(default_factory=list)
    page_severities: list[SeverityName] = Field(default_factory=_paging_default, min_length=1)
    resend_interval: float = Field(default=60.0, gt=0, le=3600)
    resolve_after: float = Field(default=300.0, gt=0, le=86_400)

    @field_validator("alertmanagers")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        bad = [u for u in value if not re.match(r"^https?://[^\s/]+(/\S*)?$", u)]
        if bad:
            raise ValueError(f"not an http(s) URL: {', '.join(bad)}")
        return value


class JobSettings(_Strict):
    """``[jobs]``: when a job stops being active (its gauges are then dropped)."""

    idle_seconds: float = Field(default=3600.0, gt=0, le=7 * 86400)


class IncidentSettings(_Strict):
    """``[incidents]``: repeats of a signature fold into one open incident with a count.

    An incident stays open while repeats come less than ``quiet_seconds`` apart; the
    console, status page and pager see its count grow at most every ``update_seconds`` (the
    interval grows with the incident's age, up to ``max_update_seconds``).
    """

    fold: bool = True
    quiet_seconds: float = Field(default=300.0, gt=0, le=86_400)
    update_seconds: float = Field(default=10.0, gt=0, le=3600)
    max_update_seconds: float = Field(default=60.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _ordered(self) -> IncidentSettings:
        if self.max_update_seconds < self.update_seconds:
            msg = "max_update_seconds must be at least update_seconds"
            raise ValueError(msg)
        return self


def _default_sources() -> list[SourceConfig]:
    return [SourceConfig(name="training", paths=[DEFAULT_WATCH])]


class Config(_Strict):
    """Everything the composition root needs; components never see this object."""

    sources: list[SourceConfig] = Field(default_factory=_default_sources, min_length=1)
    patterns: list[Path] = Field(default_factory=list)  # empty: the built-in library
    add_patterns: list[Path] = Field(default_factory=list)  # site folders, loaded as well
    listen: str = DEFAULT_LISTEN
    state_dir: Path = Field(default_factory=default_state_dir)
    events: Path | None = None
    console: bool = True
    max_line_bytes: int = Field(default=64 * 1024, ge=256, le=64 * 1024 * 1024)
    regex_timeout: float = Field(default=0.05, gt=0, le=10)
    poll_interval: float = Field(default=1.0, gt=0, le=60)
    rescan_interval: float = Field(default=5.0, gt=0, le=3600)
    checkpoint_interval: float = Field(default=1.0, ge=0, le=600)
    read_budget_bytes: int = Field(default=4 << 20, ge=4096)
    max_files: int = Field(default=20_000, ge=1)
    inotify: bool = True
    # A daemon running as root does not follow a symlink out of the watched trees (into files
    # only root may read) unless this is set.
    follow_symlinks_outside: bool = False
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    web: WebSettings = Field(default_factory=WebSettings)
    detectors: DetectorSettings = Field(default_factory=DetectorSettings)
    alerting: AlertingSettings = Field(default_factory=AlertingSettings)
    policy: PolicySettings = Field(default_factory=PolicySettings)
    slurm: SlurmSettings | None = None  # drain and resume this node in Slurm
    jobs: JobSettings = Field(default_factory=JobSettings)
    incidents: IncidentSettings = Field(default_factory=IncidentSettings)
    # "": the host name; "${NODE_NAME}" (or $NODE_NAME, ${NODE_NAME:-default}): from the
    # environment, as a Kubernetes DaemonSet sets it from spec.nodeName.
    node: str = Field(default="", pattern=r"^[A-Za-z0-9_.:-]{0,253}$")

    @field_validator("node", mode="before")
    @classmethod
    def _node_from_environment(cls, value: object) -> object:
        return expand_env_reference(value) if isinstance(value, str) else value

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        try:
            parse_listen(value)
        except ListenAddressError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("sources")
    @classmethod
    def _unique_names(cls, value: list[SourceConfig]) -> list[SourceConfig]:
        names = [s.name for s in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            msg = f"duplicate source name(s): {', '.join(dupes)}"
            raise ValueError(msg)
        return value


class ConfigProblemsError(ConfigError):
    """Every problem of a config file at once, one line each."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        first = errors[0]
        super().__init__(first.file, first.field, first.reason)

    def __str__(self) -> str:
        return "\nsigwatch: ".join(str(e) for e in self.errors)


def load_config(path: Path | None, **overrides: object) -> Config:
    """Read and validate a config file (or the defaults), applying command-line overrides."""
    file = str(path) if path else "<defaults>"
    data: dict[str, object] = {}
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(file, "", f"cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(file, "", f"not UTF-8 text: {exc.reason}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(file, "", f"invalid TOML: {exc}") from None
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        errors = [ConfigError(file, field_path(err["loc"]),
                              "unknown key" if err["type"] == "extra_forbidden" else err["msg"])
                  for err in exc.errors()]
        raise ConfigProblemsError(errors) from None
