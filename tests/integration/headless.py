"""Debian's Chromium, headless, driven over the DevTools protocol on a pipe: no webdriver, no port, no download.

A test waits for a condition the page states (``document.body.dataset``), not for a guessed time budget:
Chromium's ``--virtual-time-budget`` does not wait reliably for a streamed ``fetch()``.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import signal
import time
from pathlib import Path
from types import TracebackType
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-proxy-server",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
COMMAND_TIMEOUT_S = 30.0


class BrowserError(Exception):
    pass


class Chromium:
    """One headless Chromium with one page. ``with Chromium(profile) as browser: browser.open(url) …``"""

    def __init__(self, profile: Path, *, width: int = 1400, height: int = 1000) -> None:
        self._profile = profile
        self._size = (width, height)
        self._next_id = 0
        self._buffer = b""
        self._session = ""

    def __enter__(self) -> Chromium:
        if not CHROMIUM.exists():
            raise BrowserError("Debian's chromium is missing: run `make browser`")
        self._profile.mkdir(parents=True, exist_ok=True)
        # Chromium reads commands from fd 3 and writes replies to fd 4. posix_spawn puts our pipe ends there
        # (they sit above 10, so one dup2 cannot clobber the other's source) and is safe with threads.
        commands_read, commands_write = _high_pipe()
        replies_read, replies_write = _high_pipe()
        log = os.open(
            self._profile / "chromium.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600
        )
        width, height = self._size
        argv = [
            str(CHROMIUM),
            *FLAGS,
            f"--user-data-dir={self._profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self._pid = os.posix_spawn(
            argv[0],
            argv,
            dict(os.environ),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
                (os.POSIX_SPAWN_DUP2, commands_read, 3),
                (os.POSIX_SPAWN_DUP2, replies_write, 4),
            ],
        )
        for fd in (commands_read, replies_write, log):
            os.close(fd)
        self._to_browser = commands_write
        self._from_browser = replies_read
        target = next(
            info["targetId"]
            for info in self._send("Target.getTargets")["targetInfos"]
            if info["type"] == "page"
        )
        self._session = self._send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.command("Page.enable")
        self.command(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        with contextlib.suppress(BrowserError, OSError):
            self._send("Browser.close")
        deadline = time.monotonic() + 10
        while os.waitpid(self._pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self._pid, signal.SIGKILL)
                os.waitpid(self._pid, 0)
                break
            time.sleep(0.05)
        os.close(self._to_browser)
        os.close(self._from_browser)

    def open(self, url: str) -> None:
        self.command("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        reply = self.command("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression!r} raised: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, *, timeout_s: float = 60.0) -> None:
        """Until ``expression`` is truthy in the page (a bound against hanging, not a timing claim)."""
        deadline = time.monotonic() + timeout_s
        while not self._holds(expression):
            if time.monotonic() > deadline:
                state = self.evaluate("document.body ? JSON.stringify(document.body.dataset) : 'no body'")
                raise BrowserError(f"{expression!r} did not hold within {timeout_s} s; body: {state}")
            time.sleep(0.1)

    def _holds(self, expression: str) -> bool:
        try:
            return bool(self.evaluate(expression))
        except BrowserError:
            return False  # e.g. the page is between documents while it navigates

    def dom(self) -> str:
        html: str = self.evaluate("document.documentElement.outerHTML")
        return html

    def screenshot(self, path: Path) -> None:
        png = self.command("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(png))

    def command(self, method: str, **params: Any) -> dict[str, Any]:
        """A command to the page."""
        return self._send(method, session=self._session, **params)

    def _send(self, method: str, *, session: str = "", **params: Any) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") != self._next_id:
                continue  # an event, or a reply we stopped waiting for
            if "error" in reply:
                raise BrowserError(f"{method}: {reply['error']}")
            result: dict[str, Any] = reply["result"]
            return result

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            readable, _, _ = select.select([self._from_browser], [], [], max(0.0, remaining))
            if not readable:
                raise BrowserError("chromium did not answer")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        parsed: dict[str, Any] = json.loads(message)
        return parsed


def _high_pipe() -> tuple[int, int]:
    read, write = os.pipe()
    high = (fcntl.fcntl(read, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, 10))
    os.close(read)
    os.close(write)
    return high
