"""A raydag that serves a home: where it answers, so that commands on the same home use it.

``raydag serve`` records itself in ``RAYDAG_HOME/serving.json`` once its API answers, and removes the record when
it starts stopping. ``raydag run``, ``batch``, ``continue`` and ``raydag.start()`` on that home then make their
runs through its API over loopback, as ``--url`` does, instead of starting a Ray and a PostgreSQL of their own
(docs/BENCHMARKS.md, "A run from the terminal"); ``runs``, ``inbox``, ``watch``, ``cancel``, ``approvals``,
``reviews`` and ``questions`` ask it unless told where. ``raydag up`` starts such a raydag in the background and
``raydag down`` stops it.

The record is a hint, never trusted alone: a command attaches only when the record is its user's own and no
other may write it, the process it names is alive, serves the same toolsets, and answers ``/healthz``. It names
only public keys (the development keys, the approver's apart), and none for a raydag with keys of its own
(docs/CLI.md, "Which raydag, and which key").
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_HOME = Path("~/.raydag")
"""``RAYDAG_HOME`` when the environment names none."""
SERVING_FILE = "serving.json"
TOOLSETS_ENV = "RAYDAG_TOOLSETS"
"""``actors.toolsets.TOOLSETS_ENV``, written out: importing the toolsets would cost a command's start."""
ANSWER_WITHIN_S = 1.0
"""How long a command waits for a recorded raydag's ``/healthz`` before running on its own instead."""


@dataclass(frozen=True)
class Serving:
    url: str
    """Where its API answers, over loopback when it listens on every address."""
    pid: int
    """The ``raydag serve`` process."""
    toolsets: str | None
    """The toolsets file it serves (its resolved path); ``None``: the shipped toolsets."""
    development_keys: dict[str, str]
    """The development API key it takes for each tenant (none with ``RAYDAG_API_KEYS``): public keys, taken on
    loopback only."""
    approver_keys: dict[str, str] = field(default_factory=dict)
    """The development approver's key for each tenant (``dev-key-approver``; none with ``RAYDAG_API_KEYS``):
    what the commands that decide for a person use on this raydag when no ``--api-key`` is given. Public too:
    the record holds no secret. A raydag with keys of its own records none, and a person gives theirs."""


def serving_url(host: str, port: int) -> str:
    """The URL a command on this machine reaches a raydag listening on ``host``:``port`` at."""
    reachable = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    if ":" in reachable:
        reachable = f"[{reachable}]"
    return f"http://{reachable}:{port}"


@contextlib.contextmanager
def recorded(home: Path, serving: Serving) -> Iterator[None]:
    """``serving`` recorded in ``home`` for the block (written whole, readable by its owner alone); removed on
    leaving it, unless another raydag has recorded itself since."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / SERVING_FILE
    scratch = home / f".{SERVING_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
    descriptor = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(asdict(serving), file)
    os.replace(scratch, path)
    try:
        yield
    finally:
        current = _read(path)
        if current is not None and current.pid == serving.pid:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def recorded_in(home: Path) -> Serving | None:
    """The raydag recorded in ``home`` if its process is alive (whether it answers is ``answers``'s), and if
    the record is this user's own, which no other may write (``owned``)."""
    import psutil

    path = home / SERVING_FILE
    serving = _read(path) if owned(path) else None
    if serving is None or not psutil.pid_exists(serving.pid):
        return None
    return serving


def serving_here(home: Path, toolsets: Path | None) -> Serving | None:
    """The raydag serving ``home`` with ``toolsets`` (``None``: the shipped ones) that answers now, if any."""
    serving = recorded_in(home)
    wanted = str(toolsets.resolve()) if toolsets is not None else None
    if serving is None or serving.toolsets != wanted or not answers(serving.url):
        return None
    return serving


def serving_for(environment: Mapping[str, str], toolsets: Path | None) -> Serving | None:
    """The raydag a run asked for in ``environment`` is made by, if one answers: the one serving its
    ``RAYDAG_HOME`` with ``toolsets`` (``None``: ``RAYDAG_TOOLSETS``, else the shipped ones). The rule every
    surface attaches by (``raydag run``, ``batch``, ``continue``, ``raydag.start``), read from the environment
    alone: the settings cost half a second to load."""
    named = toolsets or (Path(environment[TOOLSETS_ENV]) if environment.get(TOOLSETS_ENV) else None)
    return serving_here(home_in(environment), named)


def key_for(serving: Serving, tenant: str, api_key: str | None, *, decides: bool = False) -> str | None:
    """The API key a request for ``tenant`` is made with there: ``api_key`` if given, else the tenant's
    development key when that raydag takes those (its approver's, for a request that ``decides`` what waits
    for a person); ``None``: it takes keys of its own, and one must be given."""
    if api_key is not None:
        return api_key
    return (serving.approver_keys if decides else serving.development_keys).get(tenant)


def owned(path: Path) -> bool:
    """Whether ``path`` is this user's and no one else may write it: a record another user could write (a
    home shared through a group, a world-writable folder) could send a command's key, or a person's decision,
    to a server of theirs."""
    try:
        status = path.stat()
    except OSError:
        return False
    return status.st_uid == os.geteuid() and not status.st_mode & 0o022


def home_in(environment: Mapping[str, str]) -> Path:
    """``RAYDAG_HOME`` as the settings read it, from ``environment`` alone (the settings cost a command half a
    second to load)."""
    return Path(environment.get("RAYDAG_HOME") or DEFAULT_HOME).expanduser().resolve()


def answers(url: str, within_s: float = ANSWER_WITHIN_S) -> bool:
    """Whether the raydag API at ``url`` answers ``/healthz`` within ``within_s``."""
    import urllib.error  # here: every command's start would pay ~20 ms for it
    import urllib.request

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy
    try:
        with direct.open(f"{url}/healthz", timeout=within_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _read(path: Path) -> Serving | None:
    try:
        data = json.loads(path.read_text())
        return Serving(
            url=str(data["url"]),
            pid=int(data["pid"]),
            toolsets=None if data["toolsets"] is None else str(data["toolsets"]),
            development_keys={str(tenant): str(key) for tenant, key in data["development_keys"].items()},
            approver_keys={str(tenant): str(key) for tenant, key in data.get("approver_keys", {}).items()},
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # none, or not one raydag wrote: nothing to attach to
