"""A page raised while Alertmanager hangs survives a SIGKILL of the daemon.

Alertmanager keeps nothing for a client it never answered, and the line that raised the page
is committed by the checkpoint (it is not read again after a restart): the saved queue is the
page's only copy. Before: the queue was saved after the post, so a daemon killed while a post
hung (up to its 5 s timeout) lost the page. Now it is saved before any post.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.daemon import wait_for
from support.hostile import Rig, write_lines
from support.servers import Alertmanager, WebhookReceiver, alertmanager_config

pytestmark = pytest.mark.integration


class HangingAlertmanager:
    """Accepts connections and reads the POST, never answers (a hung Alertmanager)."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self.posted = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)
            conn.settimeout(30)
            try:
                if b"POST /api/v2/alerts" in conn.recv(65536):
                    self.posted.set()
            except OSError:
                continue

    def stop(self) -> None:
        self._sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture(name="hanging")
def _hanging() -> Iterator[HangingAlertmanager]:
    server = HangingAlertmanager()
    yield server
    server.stop()


def test_a_page_raised_while_alertmanager_hangs_survives_sigkill(
        rig: Rig, hanging: HangingAlertmanager, tmp_path: Path) -> None:
    d = rig.start("--alertmanager", hanging.url)
    d.wait_started()
    rig.wait_seqs(write_lines(rig.logs / "app.log", [1]), daemon=d)
    assert hanging.posted.wait(30), "the daemon never posted the page"
    # A checkpoint written after a later line was read commits the page's line.
    lines = d.metric("sigwatch_lines_total") or 0
    with open(rig.logs / "app.log", "ab") as fh:
        fh.write(b"INFO a later line\n")
    wait_for(lambda: (d.metric("sigwatch_lines_total") or 0) > lines, timeout=120,
             what="the later line read")
    commits = d.metric("sigwatch_checkpoint_writes_total") or 0
    wait_for(lambda: (d.metric("sigwatch_checkpoint_writes_total") or 0) > commits,
             timeout=120, what="a checkpoint that commits the line")
    d.kill()  # while the post hangs

    pager = WebhookReceiver()
    am = Alertmanager(tmp_path / "am", alertmanager_config(pager.url))
    try:
        am.wait_ready()
        again = rig.start("--alertmanager", am.url)
        again.wait_started()
        pager.wait(lambda p: p.alerts(signature="test_error_seq"), 60,
                   "the page saved before the SIGKILL")
        # It came from the saved queue: the committed line was not read (or detected) again.
        assert not again.metric("sigwatch_detections_total", signature="test_error_seq")
        assert [1] == rig.seqs()
    finally:
        am.stop()
        pager.stop()
