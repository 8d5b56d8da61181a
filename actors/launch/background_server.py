"""An ASGI app served by uvicorn on a background thread, bound to loopback, with bounded start and stop."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


class BackgroundServer:
    """Binds on construction, so the URL is known before the app (which may need it) is built."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.host, self.port = self._socket.getsockname()[:2]
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, app: Any, timeout_s: float = 30.0) -> BackgroundServer:
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._server = server
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [self._socket]}, daemon=True, name=f"http:{self.port}"
        )
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.02)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout_s)
        self._socket.close()
