"""The ports raydag listens on are its own: refused when another process holds them, never shared with one.

Ray Serve's proxy binds with ``SO_REUSEPORT`` (Ray 2.60, ``ray/serve/_private/proxy.py``): any other process
of the same user can bind the same port beside it and silently receive part of its connections, API keys
and task tokens included. ``SERVE_SOCKET_REUSE_PORT_ENABLED=0`` in the proxy's environment turns that off,
and ``SO_REUSEADDR`` with it: a proxy started within a minute of its predecessor's exit then cannot bind
over that one's closing connections (TCP TIME_WAIT). ``raydag serve`` and ``serve run serve_app:app``
therefore run Ray workers with ``SERVE_SETUP_HOOK``: the proxy binds with ``SO_REUSEADDR`` alone, like any
server. Either way raydag checks, once Serve listens, that nothing can bind beside it (``ensure_exclusive``).
"""

from __future__ import annotations

import errno
import socket

from dag.errors import RaydagError

SERVE_SETUP_HOOK = "actors.launch.ports.bind_serve_proxies_exclusively"
"""A Ray ``worker_process_setup_hook`` (``runtime_env``) for the job that starts Serve."""


def bind_serve_proxies_exclusively() -> None:
    """Make Serve's proxies in this Ray worker bind their port with ``SO_REUSEADDR`` and without
    ``SO_REUSEPORT`` (``SERVE_SETUP_HOOK``). Patches the one function of Ray 2.60 that sets both."""
    from ray.serve._private import http_util

    http_util.set_socket_reuse_port = _reuse_address_only


def _reuse_address_only(sock: socket.socket) -> bool:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return True


class PortTaken(RaydagError):
    """Another process listens on the address raydag was asked to listen on. The operator must choose."""

    def __init__(self, host: str, port: int, setting: str) -> None:
        super().__init__(
            f"{host}:{port} is already in use by another process: stop it, or choose another port ({setting})"
        )
        self.host = host
        self.port = port


class PortShared(RaydagError):
    """The listener raydag started lets other processes bind the same port beside it (``SO_REUSEPORT``)."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"the server on {host}:{port} lets other processes bind the same port and take part of its "
            "connections (SO_REUSEPORT): this Ray's Serve was started without "
            "SERVE_SOCKET_REUSE_PORT_ENABLED=0. Start the cluster with it in the environment of `ray start`, "
            "or shut Serve down (`serve shutdown`) so that raydag starts it anew"
        )
        self.host = host
        self.port = port


def _socket(host: str) -> socket.socket:
    return socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)


def bind_exclusively(host: str, port: int, *, setting: str = "RAYDAG_PORT") -> socket.socket:
    """A socket bound to ``host:port`` that no other socket can share; ``PortTaken`` if one listens there.

    ``SO_REUSEADDR`` only lets it bind over connections of an earlier server left in TIME_WAIT; on Linux it
    never lets two sockets listen on one port. ``setting`` names what the operator changes to pick another.
    """
    sock = _socket(host)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortTaken(host, port, setting) from None
        raise
    return sock


def ensure_free(host: str, port: int, *, setting: str = "RAYDAG_PORT") -> None:
    """Raise ``PortTaken`` unless a server could listen on ``host:port`` now (as ``bind_exclusively``)."""
    bind_exclusively(host, port, setting=setting).close()


def can_bind_beside(host: str, port: int) -> bool:
    """Whether a socket of this user can bind ``host:port`` now with ``SO_REUSEPORT``: with a server listening
    there, whether that server shares its port. The probe never listens, so it never receives a connection."""
    probe = _socket(host)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        probe.bind((host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return False
        raise
    finally:
        probe.close()
    return True


def ensure_exclusive(host: str, port: int) -> None:
    """Raise ``PortShared`` if the server listening on ``host:port`` lets another socket bind beside it. Call it
    while that server listens (with none, anything could bind: ``PortShared`` too)."""
    if can_bind_beside(host, port):
        raise PortShared(host, port)


def refuse_shared_listener(host: str, port: int) -> None:
    """``PortShared`` if a server listens on ``host:port`` and lets other sockets bind beside it. Nothing if
    none listens: there is nothing to judge yet."""
    with _socket(host) as client:
        client.settimeout(2.0)
        if client.connect_ex((host, port)) != 0:
            return
    ensure_exclusive(host, port)
