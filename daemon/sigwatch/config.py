"""The daemon configuration (TOML), validated strictly: unknown keys are errors."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sigwatch.errors import ConfigError, field_path

__all__ = ["DEFAULT_LISTEN", "DEFAULT_WATCH", "Config", "SourceConfig", "default_state_dir",
           "load_config"]

DEFAULT_WATCH = "/var/log/training/**/*.log"
DEFAULT_LISTEN = "127.0.0.1:9750"


def default_state_dir() -> Path:
    """systemd's StateDirectory when set, /var/lib/sigwatch as root, else the user's state dir."""
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    if os.geteuid() == 0:
        return Path("/var/lib/sigwatch")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "sigwatch"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceConfig(_Strict):
    """A named group of files; the name is the ``source`` label."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
    paths: list[str] = Field(min_length=1)
    exclude: list[str] = Field(default_factory=list)
    start_at: Literal["end", "beginning"] = "end"


def _default_sources() -> list[SourceConfig]:
    return [SourceConfig(name="training", paths=[DEFAULT_WATCH])]


class Config(_Strict):
    """Everything the composition root needs; components never see this object."""

    sources: list[SourceConfig] = Field(default_factory=_default_sources, min_length=1)
    patterns: list[Path] = Field(default_factory=list)
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

    @field_validator("listen")
    @classmethod
    def _host_port(cls, value: str) -> str:
        _host, sep, port = value.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            msg = "must be HOST:PORT"
            raise ValueError(msg)
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
        err = exc.errors()[0]
        reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        more = len(exc.errors()) - 1
        if more:
            reason += f" (and {more} more error{'s' if more > 1 else ''})"
        raise ConfigError(file, field_path(err["loc"]), reason) from None
