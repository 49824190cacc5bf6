"""Basic auth following exporter-toolkit: hashed passwords, 401 everywhere without them."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError
from support.web import basic

from sigwatch.web.auth import (
    HASH_ONE_LINER,
    BasicAuth,
    PasswordHashError,
    hash_password,
    parse_hash,
)
from sigwatch.web.pages import detection_url
from sigwatch.web.server import parse_listen
from sigwatch.web.settings import WebSettings, exposure_warning

FAST = 1000  # PBKDF2 rounds for tests; the default is 600,000


def _auth() -> BasicAuth:
    return BasicAuth({"prometheus": hash_password("s3cret", rounds=FAST)})


class TestOverHTTP:
    @pytest.mark.parametrize("path", ["/metrics", "/", "/-/healthy", "/api/v1/detections"])
    def test_no_credentials_is_401_with_a_challenge(self, serve, path: str) -> None:
        """Every path needs credentials, /metrics included."""
        reply = serve(auth=_auth()).get(path)

        assert 401 == reply.status
        assert reply.headers["www-authenticate"].startswith('Basic realm="sigwatch"')
        assert "sigwatch_" not in reply.text

    def test_right_credentials_are_served(self, serve) -> None:
        """The configured user with the right password gets the metrics."""
        reply = serve(auth=_auth()).get("/metrics", headers=basic("prometheus", "s3cret"))

        assert 200 == reply.status

    @pytest.mark.parametrize(("user", "password"), [
        ("prometheus", "wrong"), ("nobody", "s3cret"), ("prometheus", ""),
        ("", "s3cret")], ids=["wrong-password", "unknown-user", "empty-password", "no-user"])
    def test_wrong_credentials_are_401(self, serve, user: str, password: str) -> None:
        """Anything but the right pair is refused."""
        reply = serve(auth=_auth()).get("/metrics", headers=basic(user, password))

        assert 401 == reply.status

    @pytest.mark.parametrize("header", [
        "Basic", "Basic !!!", "Bearer abc", "Basic " + base64.b64encode(b"no-colon").decode(),
        "Basic " + base64.b64encode(b"\xff\xfe:x").decode()])
    def test_malformed_authorization_is_401_not_500(self, serve, header: str) -> None:
        """Garbage in the header is just unauthenticated."""
        reply = serve(auth=_auth()).get("/metrics", headers={"Authorization": header})

        assert 401 == reply.status


class TestHashes:
    def test_pbkdf2_hash_verifies_its_password_only(self) -> None:
        """The format passlib writes: $pbkdf2-sha256$rounds$salt$hash."""
        parsed = parse_hash(hash_password("pw", rounds=FAST))

        assert ("pbkdf2-sha256", FAST, True, False) == (
            parsed.scheme, parsed.rounds, parsed.verify("pw"), parsed.verify("pW"))

    def test_scrypt_hash_verifies(self) -> None:
        """$scrypt$ln=..,r=..,p=..$salt$hash, as passlib writes it."""
        salt = b"0123456789abcdef"
        digest = hashlib.scrypt(b"pw", salt=salt, n=1 << 10, r=8, p=1, dklen=32)

        def b64(raw: bytes) -> str:
            return base64.b64encode(raw).decode().rstrip("=").replace("+", ".")

        parsed = parse_hash(f"$scrypt$ln=10,r=8,p=1${b64(salt)}${b64(digest)}")

        assert (True, False) == (parsed.verify("pw"), parsed.verify("px"))

    def test_bcrypt_hash_from_an_exporter_config_verifies(self) -> None:
        """With the optional bcrypt package, exporter-toolkit's hashes carry over."""
        bcrypt = pytest.importorskip("bcrypt")
        text = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()

        parsed = parse_hash(text)

        assert ("bcrypt", True, False) == (parsed.scheme, parsed.verify("pw"),
                                           parsed.verify("no"))

    @pytest.mark.parametrize("text", [
        "plaintext", "$pbkdf2-sha256$x$abc$def", "$pbkdf2-sha256$1000$@@@$abc",
        "$pbkdf2-sha256$1000$c2FsdA$c2hvcnQ", "$scrypt$ln=99,r=8,p=1$c2FsdA$" + "A" * 43,
        "$md5$whatever"])
    def test_unusable_hashes_are_refused_with_a_reason(self, text: str) -> None:
        """A plaintext password or an unknown scheme is a configuration error."""
        with pytest.raises(PasswordHashError):
            parse_hash(text)

    def test_the_documented_one_liner_makes_a_hash_sigwatch_accepts(self) -> None:
        """HASH_ONE_LINER (stdlib only) prints a hash that verifies the typed password."""
        command = HASH_ONE_LINER.replace("python3", sys.executable, 1)

        out = subprocess.run(["/bin/sh", "-c", command], input="typed pw\n", text=True,
                             capture_output=True, check=True, timeout=60).stdout.strip()

        assert parse_hash(out).verify("typed pw")

    def test_module_command_prints_a_hash(self) -> None:
        """python3 -m sigwatch.web.auth asks twice and prints the hash."""
        out = subprocess.run([sys.executable, "-m", "sigwatch.web.auth"], input="pw\npw\n",
                             text=True, capture_output=True, check=True, timeout=60).stdout

        assert parse_hash(out.strip()).verify("pw")


class TestSettings:
    def test_every_bad_user_is_reported_at_once(self) -> None:
        """The [web] table names each unusable entry of basic_auth_users."""
        with pytest.raises(ValidationError) as err:
            WebSettings(basic_auth_users={"a": "plain", "b": "$md5$x", "ok": hash_password(
                "x", rounds=FAST)})

        text = str(err.value)
        assert "'a'" in text
        assert "'b'" in text
        assert "'ok'" not in text

    def test_settings_build_the_auth_the_app_uses(self) -> None:
        """basic_auth() returns a checker for the configured users; none when empty."""
        settings = WebSettings(basic_auth_users={"p": hash_password("x", rounds=FAST)})
        header = basic("p", "x")["Authorization"]

        auth = settings.basic_auth()

        assert auth is not None
        assert "p" == auth.check(header)
        assert WebSettings().basic_auth() is None

    def test_client_auth_needs_a_ca_file(self) -> None:
        """Requiring client certificates without a CA to check them is refused."""
        with pytest.raises(ValidationError, match="needs client_ca_file"):
            WebSettings.model_validate({"tls_server_config": {
                "cert_file": "/c", "key_file": "/k",
                "client_auth_type": "RequireAndVerifyClientCert"}})

    def test_unknown_keys_are_errors(self) -> None:
        """A typo such as tls_config is caught, as everywhere in the config."""
        with pytest.raises(ValidationError):
            WebSettings.model_validate({"tls_config": {}})


class TestExposure:
    @pytest.mark.parametrize(("listen", "tls", "auth", "warned"), [
        ("127.0.0.1:9750", False, False, False),
        ("[::1]:9750", False, False, False),
        (":9750", False, False, True),
        (":9750", True, False, True),
        ("10.0.0.7:9750", True, True, False),
    ])
    def test_a_listener_off_loopback_without_protection_is_warned_about(
            self, listen: str, tls: bool, auth: bool, warned: bool) -> None:
        """Binding elsewhere than loopback is explicit, and unprotected exposure is logged."""
        warning = exposure_warning(parse_listen(listen), tls=tls, auth=auth)

        assert warned == (warning is not None)


def test_detection_url_joins_the_external_url_and_the_page() -> None:
    """Alerts link to the detection's page on the node."""
    assert "https://node7:9750/detections/abc" == detection_url("https://node7:9750/", "abc")


def test_the_shipped_example_web_table_is_valid() -> None:
    """deploy/web.example.toml's [web] table passes the same validation as the config."""
    example = Path(__file__).resolve().parents[2] / "deploy" / "web.example.toml"

    settings = WebSettings.model_validate(tomllib.loads(example.read_text())["web"])

    assert settings.tls_config() is not None
