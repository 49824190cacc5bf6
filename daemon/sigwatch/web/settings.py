"""The ``[web]`` table of the daemon's TOML configuration: listener limits, TLS, basic auth.

Key names follow Prometheus's exporter-toolkit web config (``--web.config.file``), so a
``tls_server_config`` or ``basic_auth_users`` block written for an exporter carries over:

.. code-block:: toml

    listen = "127.0.0.1:9750"          # top level, as today; ":9750" means every interface

    [web]
    external_url = "https://node7.example.org:9750"   # links in alerts point here

    [web.tls_server_config]
    cert_file = "/etc/sigwatch/tls/node.crt"
    key_file = "/etc/sigwatch/tls/node.key"

    [web.basic_auth_users]
    prometheus = "$pbkdf2-sha256$600000$...$..."     # python3 -m sigwatch.web.auth

A TOML table, not a separate YAML file as exporter-toolkit uses: the daemon's configuration is
TOML already, PyYAML is not a runtime dependency, and one file validated at once reports every
mistake together. The composition root turns this model into constructor arguments
(``server_limits()``, ``tls_config()``, ``basic_auth()``); components never see it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sigwatch.web.auth import BasicAuth, PasswordHashError, parse_hash
from sigwatch.web.server import ListenAddress, ServerLimits, TLSConfig
from sigwatch.web.store import DEFAULT_CAPACITY

__all__ = ["TLSServerConfig", "WebSettings", "exposure_warning"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLSServerConfig(_Strict):
    """exporter-toolkit's ``tls_server_config`` (the keys sigwatch supports)."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None
    client_auth_type: Literal[
        "NoClientCert", "RequireAndVerifyClientCert", "VerifyClientCertIfGiven"] = "NoClientCert"
    min_version: Literal["TLS12", "TLS13"] = "TLS12"

    @model_validator(mode="after")
    def _ca_for_client_auth(self) -> TLSServerConfig:
        if self.client_auth_type != "NoClientCert" and self.client_ca_file is None:
            msg = f"client_auth_type {self.client_auth_type} needs client_ca_file"
            raise ValueError(msg)
        return self


class WebSettings(_Strict):
    """Everything about the HTTP listener except its address (the top-level ``listen``)."""

    external_url: str = Field(default="", pattern=r"^(https?://[^\s/]+(/[^\s]*)?)?$")
    tls_server_config: TLSServerConfig | None = None
    basic_auth_users: dict[str, str] = Field(default_factory=dict)
    workers: int = Field(default=8, ge=1, le=64)
    max_queued: int = Field(default=16, ge=0, le=1024)
    request_timeout: float = Field(default=30.0, gt=0, le=600)
    idle_timeout: float = Field(default=10.0, gt=0, le=600)
    # Open connections still sending their request (they cost no worker); one more pushes out
    # the one that has waited longest.
    max_connections: int = Field(default=256, ge=1, le=65_536)
    history: int = Field(default=DEFAULT_CAPACITY, ge=10, le=100_000)
    status_page: bool = True
    # The status page lists an incident as open until this many seconds pass without a repeat
    # (a detector may hold one open longer: a stall not over).
    incident_window: float = Field(default=3600.0, gt=0, le=30 * 86400)

    @field_validator("basic_auth_users")
    @classmethod
    def _hashes(cls, value: dict[str, str]) -> dict[str, str]:
        errors = []
        for user, text in value.items():
            if not user or ":" in user:
                errors.append(f"{user!r}: a user name must be non-empty and without ':'")
                continue
            try:
                parse_hash(text)
            except PasswordHashError as exc:
                errors.append(f"{user!r}: {exc}")
        if errors:
            raise ValueError("; ".join(errors))
        return value

    @model_validator(mode="after")
    def _timeouts(self) -> WebSettings:
        if self.idle_timeout > self.request_timeout:
            msg = "idle_timeout must not exceed request_timeout"
            raise ValueError(msg)
        return self

    def server_limits(self) -> ServerLimits:
        return ServerLimits(workers=self.workers, queue=self.max_queued,
                            request_timeout=self.request_timeout,
                            idle_timeout=self.idle_timeout,
                            max_connections=self.max_connections)

    def tls_config(self) -> TLSConfig | None:
        t = self.tls_server_config
        if t is None:
            return None
        return TLSConfig(cert_file=t.cert_file, key_file=t.key_file,
                         client_ca_file=t.client_ca_file, client_auth_type=t.client_auth_type,
                         min_version=t.min_version)

    def basic_auth(self) -> BasicAuth | None:
        return BasicAuth(self.basic_auth_users) if self.basic_auth_users else None


def exposure_warning(listen: ListenAddress, *, tls: bool, auth: bool) -> str | None:
    """A warning to log when the listener is reachable from other hosts without protection."""
    if listen.is_loopback:
        return None
    missing = [name for name, on in (("TLS", tls), ("basic auth", auth)) if not on]
    if not missing:
        return None
    where = "every interface" if listen.all_interfaces else listen.host
    return (f"the HTTP listener on {where} has no {' and no '.join(missing)}: anyone who can "
            "reach this port can read the status page (log lines) and metrics")
