"""The exception hierarchy: every user-facing error names its file, field and reason."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConfigError", "InputError", "PatternError", "SigwatchError", "field_path"]


def field_path(loc: tuple[int | str, ...] | list[int | str]) -> str:
    """A pydantic error location as the dotted path users see: ``match.then[0].regex``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class SigwatchError(Exception):
    """Base class for errors that the CLI turns into exit status 2."""


@dataclass(frozen=True)
class _Located:
    file: str
    field: str
    reason: str

    def render(self) -> str:
        field = f" {self.field}:" if self.field else ""
        return f"{self.file}:{field} {self.reason}"


class PatternError(SigwatchError):
    """A signature file failed to parse, validate or compile."""

    def __init__(self, file: str, field: str, reason: str) -> None:
        self.location = _Located(file, field, reason)
        super().__init__(self.location.render())

    @property
    def file(self) -> str:
        return self.location.file

    @property
    def field(self) -> str:
        return self.location.field

    @property
    def reason(self) -> str:
        return self.location.reason


class ConfigError(PatternError):
    """The daemon configuration is invalid (same shape as a pattern error)."""


class InputError(SigwatchError):
    """An input file given on the command line cannot be read."""
