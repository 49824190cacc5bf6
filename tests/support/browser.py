"""A real headless Chromium for tests, driven over the W3C WebDriver HTTP protocol with urllib.

``ensure_chromium()`` finds Debian's ``chromium`` and ``chromium-driver`` and installs them with
apt-get when they are missing (as root); the test is skipped, with the reason, only when that
is impossible. ``Browser`` starts ``chromedriver`` on a free loopback port with a fresh profile,
opens one session, and is stopped by its PID. No selenium needed: the protocol is a few JSON
requests.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

__all__ = ["Browser", "ElementNotFound", "ensure_chromium"]

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--no-first-run", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars",
)
_ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
_APT_TIMEOUT = 900


def _find() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    return None


def ensure_chromium() -> tuple[str, str]:
    """(chromium, chromedriver) paths; installs Debian's packages when missing, else skips."""
    found = _find()
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip("chromium and chromium-driver are missing and cannot be installed here "
                    "(needs root and apt-get): apt-get install chromium chromium-driver")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    for cmd in (["apt-get", *lock, "update", "-qq"],
                ["apt-get", *lock, "install", "-y", "-qq", "chromium", "chromium-driver"]):
        try:
            done = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=_APT_TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            pytest.skip(f"installing chromium timed out after {_APT_TIMEOUT} s: {' '.join(cmd)}")
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            pytest.skip(f"cannot install chromium ({' '.join(cmd)} exited "
                        f"{done.returncode}): {' / '.join(tail)}")
    found = _find()
    if not found:
        pytest.skip("apt-get installed chromium, but chromium/chromedriver are not on PATH")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ElementNotFound(AssertionError):
    """No element matched a CSS selector."""


class WebDriverError(RuntimeError):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(f"{status} {error}: {message}")
        self.error = error


class Browser:
    """One chromedriver process and one session; ``close()`` ends both (by PID)."""

    def __init__(self, profile: Path, log: Path, *, width: int = 1280, height: int = 900,
                 startup_timeout: float = 30.0) -> None:
        chromium, driver = ensure_chromium()
        self.port = _free_port()
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            [driver, f"--port={self.port}", "--allowed-ips=127.0.0.1",
             f"--log-path={log.with_suffix('.driver.log')}"],
            stdout=self._log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        self.session = ""
        try:
            self._wait_ready(startup_timeout)
            caps = {"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": chromium,
                    "args": [*CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                             f"--window-size={width},{height}"],
                },
            }}}
            value = self._call("POST", "/session", caps)
            self.session = value["sessionId"]
        except BaseException:
            self.close()
            raise

    # -- protocol ------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: object | None = None,
              timeout: float = 60.0) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())["value"]
        except urllib.error.HTTPError as exc:
            doc = json.loads(exc.read() or b"{}").get("value", {})
            raise WebDriverError(exc.code, doc.get("error", ""), doc.get("message", "")
                                 ) from None

    def _wait_ready(self, timeout: float) -> None:
        """Poll chromedriver's /status until it is ready (it has no other signal)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                msg = f"chromedriver exited with {self.process.returncode}"
                raise RuntimeError(msg)
            try:
                if self._call("GET", "/status", timeout=2).get("ready"):
                    return
            except (OSError, WebDriverError, ValueError):
                pass
            if time.monotonic() > deadline:
                msg = f"chromedriver not ready after {timeout} s"
                raise RuntimeError(msg)
            time.sleep(0.05)

    def _s(self, path: str) -> str:
        return f"/session/{self.session}{path}"

    # -- what a test uses ----------------------------------------------------------------------

    def get(self, url: str) -> None:
        self._call("POST", self._s("/url"), {"url": url})

    @property
    def title(self) -> str:
        return str(self._call("GET", self._s("/title")))

    @property
    def url(self) -> str:
        return str(self._call("GET", self._s("/url")))

    def elements(self, css: str) -> list[str]:
        found = self._call("POST", self._s("/elements"), {"using": "css selector", "value": css})
        return [e[_ELEMENT] for e in found]

    def element(self, css: str) -> str:
        found = self.elements(css)
        if not found:
            msg = f"no element matches {css!r} on {self.url}"
            raise ElementNotFound(msg)
        return found[0]

    def text(self, css: str = "body") -> str:
        """The rendered text of the first match: what a person reads."""
        return str(self._call("GET", self._s(f"/element/{self.element(css)}/text")))

    def texts(self, css: str) -> list[str]:
        return [str(self._call("GET", self._s(f"/element/{e}/text"))) for e in self.elements(css)]

    def attribute(self, css: str, name: str) -> str | None:
        value = self._call("GET", self._s(f"/element/{self.element(css)}/attribute/{name}"))
        return None if value is None else str(value)

    def click(self, css: str) -> None:
        self._call("POST", self._s(f"/element/{self.element(css)}/click"), {})

    def alert_text(self) -> str | None:
        """The text of an open alert dialog, None when there is none."""
        try:
            return str(self._call("GET", self._s("/alert/text")))
        except WebDriverError as exc:
            if exc.error == "no such alert":
                return None
            raise

    def run(self, script: str) -> Any:
        """Run JavaScript through WebDriver (not subject to the page's CSP)."""
        return self._call("POST", self._s("/execute/sync"), {"script": script, "args": []})

    def resize(self, width: int, height: int) -> None:
        self._call("POST", self._s("/window/rect"), {"width": width, "height": height})

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        """Save a PNG of the page (the whole page height when Chromium can)."""
        png = None
        if full_page:
            try:
                shot = self._call("POST", self._s("/goog/cdp/execute"), {
                    "cmd": "Page.captureScreenshot",
                    "params": {"format": "png", "captureBeyondViewport": True}})
                png = base64.b64decode(shot["data"])
            except WebDriverError:
                png = None
        if png is None:
            png = base64.b64decode(self._call("GET", self._s("/screenshot")))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
        return path

    def close(self) -> None:
        if self.session:
            try:
                self._call("DELETE", self._s(""), timeout=10)
            except (OSError, WebDriverError):
                pass
            self.session = ""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()
