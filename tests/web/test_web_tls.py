"""TLS on the listener, with a self-signed certificate made by the openssl CLI in the test."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from support.web import request

from sigwatch.web.server import TLSConfig, TLSError, WebServer, build_ssl_context

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="the openssl command is not installed")


def _self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", f"/CN={name}", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True)
    return cert, key


def _client(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def _peer_cert(port: int) -> bytes:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port)) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        return der


class TestTLS:
    def test_https_request_with_a_trusted_certificate(self, serve, tmp_path: Path) -> None:
        """A client that trusts the certificate gets the page over TLS."""
        cert, key = _self_signed(tmp_path, "node7")
        s = serve(tls=TLSConfig(cert, key))

        reply = request(s.base, "/metrics", context=_client(cert))

        assert s.base.startswith("https://")
        assert 200 == reply.status

    def test_plain_http_to_the_tls_port_is_told_to_use_https(self, serve, tmp_path: Path,
                                                               ) -> None:
        """Nothing is served in clear text; the client learns why (as Go servers say)."""
        cert, key = _self_signed(tmp_path, "node7")
        s = serve(tls=TLSConfig(cert, key))

        reply = request(f"http://127.0.0.1:{s.server.port}", "/metrics")

        assert 400 == reply.status
        assert "use https://" in reply.text
        assert "sigwatch_" not in reply.text

    def test_a_rotated_certificate_is_used_without_restart(self, serve, tmp_path: Path) -> None:
        """New certificate files on disk are served from the next connection on."""
        cert, key = _self_signed(tmp_path, "old")
        s = serve(tls=TLSConfig(cert, key))
        before = _peer_cert(s.server.port)
        new_cert, new_key = _self_signed(tmp_path, "new")
        shutil.copyfile(new_key, key)
        shutil.copyfile(new_cert, cert)

        after = _peer_cert(s.server.port)

        assert before != after
        assert ssl.PEM_cert_to_DER_cert(new_cert.read_text()) == after

    def test_a_key_that_does_not_match_is_a_clear_error(self, tmp_path: Path) -> None:
        """Mismatched files fail at start-up with a TLSError naming them."""
        cert, _ = _self_signed(tmp_path, "one")
        _, other_key = _self_signed(tmp_path, "two")

        with pytest.raises(TLSError, match="not a matching PEM certificate and key"):
            WebServer(lambda e, s: [], "127.0.0.1:0", tls=TLSConfig(cert, other_key)).start()

    def test_a_missing_certificate_file_is_named(self, tmp_path: Path) -> None:
        """A typo in cert_file says which file is missing."""
        with pytest.raises(TLSError, match="cert_file .*nope.crt: no such file"):
            build_ssl_context(TLSConfig(tmp_path / "nope.crt", tmp_path / "nope.key"))

    def test_client_certificates_can_be_required(self, serve, tmp_path: Path) -> None:
        """RequireAndVerifyClientCert: a client without a certificate is refused, one with a
        certificate signed by client_ca_file is served."""
        cert, key = _self_signed(tmp_path, "server")
        client_cert, client_key = _self_signed(tmp_path, "client")
        s = serve(tls=TLSConfig(cert, key, client_ca_file=client_cert,
                                client_auth_type="RequireAndVerifyClientCert"))
        anonymous = _client(cert)
        identified = _client(cert)
        identified.load_cert_chain(client_cert, client_key)

        with pytest.raises((ssl.SSLError, ConnectionError)):
            request(s.base, "/metrics", context=anonymous)
        assert 200 == request(s.base, "/metrics", context=identified).status
