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
        self._events: list[dict[str, Any]] = []

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

    def click(self, selector: str) -> None:
        """A person's click: the mouse pressed and released at the middle of ``selector`` (scrolled into view),
        on whatever the page shows there."""
        where = self.evaluate(
            f"""(() => {{
              const found = document.querySelector({json.dumps(selector)});
              if (!found) return null;
              found.scrollIntoView({{block: "center"}});
              const box = found.getBoundingClientRect();
              return [box.x + box.width / 2, box.y + box.height / 2];
            }})()"""
        )
        if where is None:
            raise BrowserError(f"nothing on the page matches {selector!r}")
        x, y = where
        for kind in ("mousePressed", "mouseReleased"):
            self.command("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type_text(self, selector: str, text: str) -> None:
        """Click into ``selector`` and type ``text`` there, as a keyboard would."""
        self.click(selector)
        self.command("Input.insertText", text=text)

    def hold_requests(self, *url_patterns: str) -> None:
        """From now on, hold the page's requests whose URL matches one of ``url_patterns`` (``*`` matches
        anything) until ``release_requests``: a network slow for those requests only."""
        self.command("Fetch.enable", patterns=[{"urlPattern": pattern} for pattern in url_patterns])

    def held_requests(self) -> list[dict[str, Any]]:
        """The requests held so far and not yet released (``Fetch.requestPaused`` events)."""
        self._read_pending_events()
        return [event["params"] for event in self._events if event.get("method") == "Fetch.requestPaused"]

    def wait_for_held(self, *, timeout_s: float = 30.0) -> list[dict[str, Any]]:
        """The held requests, once there is one (a bound against hanging, not a timing claim)."""
        deadline = time.monotonic() + timeout_s
        while not (held := self.held_requests()):
            if time.monotonic() > deadline:
                raise BrowserError(f"no request was held within {timeout_s} s")
            time.sleep(0.05)
        return held

    def release_requests(self, *, rewrite: dict[str, str] | None = None) -> None:
        """Let every held request go and hold no more; ``rewrite`` maps a held request's URL to the body it
        is sent with instead of its own."""
        for held in self.held_requests():
            body = (rewrite or {}).get(held["request"]["url"])
            extra = {"postData": base64.b64encode(body.encode()).decode()} if body is not None else {}
            self.command("Fetch.continueRequest", requestId=held["requestId"], **extra)
        self._events = [event for event in self._events if event.get("method") != "Fetch.requestPaused"]
        self.command("Fetch.disable")

    def record_responses(self) -> None:
        """From now on, note every response the page receives (``responses``)."""
        self.command("Network.enable")

    def responses(self) -> list[tuple[str, str, int]]:
        """Each response the page received since ``record_responses``: its request's method, URL and status."""
        self._read_pending_events()
        sent = {
            event["params"]["requestId"]: event["params"]["request"]["method"]
            for event in self._events
            if event.get("method") == "Network.requestWillBeSent"
        }
        return [
            (
                sent.get(event["params"]["requestId"], "?"),
                event["params"]["response"]["url"],
                event["params"]["response"]["status"],
            )
            for event in self._events
            if event.get("method") == "Network.responseReceived"
        ]

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
            if "method" in reply:
                self._events.append(reply)  # an event: kept for whoever asks (held requests, responses)
                continue
            if reply.get("id") != self._next_id:
                continue  # a reply we stopped waiting for
            if "error" in reply:
                raise BrowserError(f"{method}: {reply['error']}")
            result: dict[str, Any] = reply["result"]
            return result

    def _read_pending_events(self) -> None:
        """Every message Chromium has written so far, without waiting for more."""
        while True:
            while b"\0" in self._buffer:
                message, _, self._buffer = self._buffer.partition(b"\0")
                parsed = json.loads(message)
                if "method" in parsed:
                    self._events.append(parsed)
            readable, _, _ = select.select([self._from_browser], [], [], 0)
            if not readable:
                return
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError("chromium closed its DevTools pipe")
            self._buffer += chunk

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
