"""The operational routes: /-/healthy, /-/ready, /metrics, 404, 405, HEAD, security headers."""

from __future__ import annotations

import gzip

from prometheus_client import CollectorRegistry, Counter

from sigwatch.web.app import register_process_collectors
from sigwatch.web.render import CONTENT_SECURITY_POLICY


class TestHealth:
    def test_healthy_while_the_pump_beats(self, serve) -> None:
        """A beat within max_silence: 200."""
        s = serve()
        s.liveness.beat()
        s.clock.advance(29)

        reply = s.get("/-/healthy")

        assert 200 == reply.status

    def test_unhealthy_when_the_pump_stops_beating(self, serve) -> None:
        """No beat for longer than max_silence: 503 that says for how long."""
        s = serve()
        s.liveness.beat()
        s.clock.advance(31)

        reply = s.get("/-/healthy")

        assert 503 == reply.status
        assert "31 s" in reply.text

    def test_unhealthy_before_the_first_beat(self, serve) -> None:
        """A pump that never started is not healthy."""
        assert 503 == serve().get("/-/healthy").status


class TestReady:
    def test_not_ready_until_marked(self, serve) -> None:
        """Starting: 503 with the reason."""
        s = serve()
        s.liveness.set_ready(False, "first scan running")

        reply = s.get("/-/ready")

        assert (503, "sigwatch is not ready: first scan running.\n") == (reply.status, reply.text)

    def test_ready_once_marked(self, serve) -> None:
        """First scan done and patterns loaded: 200."""
        s = serve()
        s.liveness.set_ready()

        assert 200 == s.get("/-/ready").status


class TestMetrics:
    def test_metrics_exposes_the_injected_registry_and_process_metrics(self, serve) -> None:
        """The daemon's own series and process_* appear in the text format."""
        registry = CollectorRegistry()
        Counter("sigwatch_test_things", "Things.", registry=registry).inc(3)
        register_process_collectors(registry)
        s = serve(registry=registry)

        reply = s.get("/metrics")

        assert 200 == reply.status
        assert reply.headers["content-type"].startswith("text/plain; version=")
        assert "sigwatch_test_things_total 3.0" in reply.text
        assert "process_resident_memory_bytes" in reply.text
        assert "python_info{" in reply.text

    def test_metrics_negotiates_openmetrics(self, serve) -> None:
        """Prometheus asks for OpenMetrics and gets it (with the # EOF marker)."""
        s = serve()

        reply = s.get("/metrics", headers={"Accept": "application/openmetrics-text"})

        assert reply.headers["content-type"].startswith("application/openmetrics-text")
        assert reply.text.endswith("# EOF\n")

    def test_metrics_are_gzipped_when_asked(self, serve) -> None:
        """Accept-Encoding: gzip gives a gzip body."""
        registry = CollectorRegistry()
        Counter("sigwatch_test_zip", "Zip.", registry=registry).inc()
        s = serve(registry=registry)

        reply = s.get("/metrics", headers={"Accept-Encoding": "gzip"})

        assert "gzip" == reply.headers["content-encoding"]
        assert b"sigwatch_test_zip_total 1.0" in gzip.decompress(reply.body)


class TestRouting:
    def test_unknown_path_is_404(self, serve) -> None:
        """Unlike prometheus_client's server, other paths are not the metrics page."""
        reply = serve().get("/metricsX")

        assert 404 == reply.status
        assert "sigwatch_" not in reply.text

    def test_unknown_api_path_is_a_json_404(self, serve) -> None:
        """Under /api/ errors are JSON."""
        reply = serve().get("/api/v1/nothing")

        assert (404, "application/json; charset=utf-8") == (
            reply.status, reply.headers["content-type"])

    def test_wrong_method_is_405_with_allow(self, serve) -> None:
        """POST with a body to a read-only route: 405 and the allowed methods."""
        reply = serve().get("/metrics", method="POST", body=b"x" * 10_000)

        assert (405, "GET, HEAD") == (reply.status, reply.headers["allow"])

    def test_head_has_headers_and_no_body(self, serve) -> None:
        """HEAD answers like GET without the body."""
        s = serve()
        s.liveness.beat()

        reply = s.get("/-/healthy", method="HEAD")

        assert (200, b"") == (reply.status, reply.body)
        assert int(reply.headers["content-length"]) > 0

    def test_every_response_carries_the_security_headers(self, serve) -> None:
        """CSP, nosniff, no framing, no referrer: also on errors."""
        for path in ("/", "/nothing", "/metrics", "/api/v1/detections?limit=0"):
            reply = serve().get(path)

            assert CONTENT_SECURITY_POLICY == reply.headers["content-security-policy"]
            assert "nosniff" == reply.headers["x-content-type-options"]
            assert "DENY" == reply.headers["x-frame-options"]
            assert "no-referrer" == reply.headers["referrer-policy"]

    def test_server_banner_does_not_reveal_versions(self, serve) -> None:
        """The Server header names sigwatch, not the Python version."""
        reply = serve().get("/nothing")

        assert "Python" not in reply.headers["server"]
        assert "sigwatch" in reply.headers["server"]

    def test_a_failing_handler_is_a_500_without_details(self, serve) -> None:
        """An exception in a route is logged, and the client sees no traceback."""
        s = serve()

        def boom(_request):
            raise RuntimeError("secret detail")

        s.app.add_route("/boom", boom)
        reply = s.get("/boom")

        assert 500 == reply.status
        assert "secret detail" not in reply.text
