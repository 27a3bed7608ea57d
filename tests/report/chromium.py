"""A headless chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``), for tests.

``--dump-dom`` cannot show a page with scripts off (it reads the DOM with JavaScript, so it prints nothing);
this client loads pages in one browser and reads the DOM with the protocol's DOM domain, which works with
the page's scripts disabled (`Emulation.setScriptExecutionDisabled`). No package beyond the standard library.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class ChromiumError(RuntimeError):
    """The browser died, answered with an error or did not answer in time."""


class Chromium:
    """One headless browser with one page; `load` returns a URL's DOM as HTML after its load event."""

    def __init__(self, profile_dir, timeout: float = 60.0) -> None:
        if CHROMIUM is None:
            raise ChromiumError("chromium is not installed")
        self.timeout = timeout
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def on_fds_3_and_4() -> None:  # the protocol pipe: the browser reads fd 3 and writes fd 4
            read, write = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self._process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile_dir}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=on_fds_3_and_4, pass_fds=(3, 4))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self._call("Page.enable", session=True)

    def _send(self, message: dict) -> None:
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise ChromiumError(f"chromium did not answer in {self.timeout:.0f} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise ChromiumError(f"chromium closed the pipe (exit status {self._process.poll()})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _call(self, method: str, params: dict | None = None, session: bool = False) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        self._send(message)
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._receive(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise ChromiumError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._events.append(answer)

    def _wait_for(self, event: str) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            while self._events:
                if self._events.pop(0).get("method") == event:
                    return
            self._events.append(self._receive(deadline))

    def load(self, url: str, scripts: bool = True) -> str:
        """The DOM of `url` after its load event, serialised (`scripts=False`: the page's JavaScript is off)."""
        self._call("Emulation.setScriptExecutionDisabled", {"value": not scripts}, session=True)
        self._events.clear()
        self._call("Page.navigate", {"url": url}, session=True)
        self._wait_for("Page.loadEventFired")
        root = self._call("DOM.getDocument", {"depth": 0}, session=True)["root"]["nodeId"]
        return self._call("DOM.getOuterHTML", {"nodeId": root}, session=True)["outerHTML"]

    def close(self) -> None:
        """End the browser and close the pipe."""
        try:
            self._call("Browser.close")
        except (ChromiumError, OSError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
