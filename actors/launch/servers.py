"""The long-running commands: ``raydag serve`` (the API under Ray Serve) and ``raydag mcp`` (the tool server
alone). Each owns its port, and stops on SIGINT or SIGTERM in an order that loses nothing in flight.

``raydag serve`` stops in this order: the supervisor hands its runs over (it refuses new ones, lets its tool
calls in flight land and be recorded while the tool server is still up, then stops driving its runs without
ending them, so that a supervisor of the same name resumes them); the application is deleted, so Serve stops
routing to it and its replicas finish the requests they have within their graceful-shutdown window; Serve
shuts down; Ray shuts down and every process it started is gone; the embedded PostgreSQL, if it started it,
stops.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from actors.launch.local import database, hand_over_all, local_ray
from actors.launch.ports import SERVE_SETUP_HOOK, PortTaken, bind_exclusively, ensure_exclusive, ensure_free
from actors.launch.serving import Serving, recorded, serving_url
from actors.launch.settings import DEV_API_KEYS, Settings
from actors.launch.shutdown import Interrupted, Steps, catch_stop_signals, interrupted, stop_descendants
from actors.supervisor import NAMESPACE, supervisor_names

if TYPE_CHECKING:
    from actors.launch.hosting import HostedServer, HostedToolset

APP_NAME = "raydag"
"""The Serve application ``raydag serve`` runs (``serve_config.yaml`` names it the same)."""
PROXY_LOCATION = "HeadOnly"
"""Where Serve runs its proxy when raydag starts Serve: one, on the head node, the node whose loss is the
cluster's anyway (Serve's controller and Ray's GCS live there). Serve's default runs one on every node that
holds a replica, each on ``RAYDAG_HOST:RAYDAG_PORT``: on one machine with several Ray nodes they cannot all bind
it and restart in a loop, and on several a client would not know which address stays. ``serve_config.yaml``
says the same."""
GRACEFUL_WINDOW_S = 80.0
"""How long the stop waits for the application's replicas to finish their requests: their own graceful
window (``graceful_shutdown_timeout_s``, 70 s) and a margin."""


def start_serve(settings: Settings) -> bool:
    """Serve on ``RAYDAG_HOST:RAYDAG_PORT`` in the connected Ray, its one proxy on the head node
    (``PROXY_LOCATION``), unless it runs there already; ``True`` if this process started it. The Ray must run
    this job's workers with ``actors.launch.ports.SERVE_SETUP_HOOK``, so that the proxy owns its port; callers
    then check that it does (``ensure_exclusive``).

    ``PortTaken`` if another process listens there (checked before, and caught again from the proxy if one
    bound it meanwhile; Serve is shut down again then).
    """
    import ray
    from ray import serve

    host, port = settings.host, settings.port
    if serve.status().proxies:
        return False
    ensure_free(host, port)
    try:
        serve.start(proxy_location=PROXY_LOCATION, http_options={"host": host, "port": port})
    except ray.exceptions.RayTaskError as exc:
        serve.shutdown()  # type: ignore[no-untyped-call]
        if "Failed to bind" in str(exc):
            raise PortTaken(host, port, "RAYDAG_PORT") from None
        raise
    return True


def serving_of(settings: Settings) -> Serving:
    """This process, as ``raydag serve`` records itself for the commands on its home (``actors.launch.serving``)."""
    return Serving(
        url=serving_url(settings.host, settings.port),
        pid=os.getpid(),
        toolsets=str(settings.toolsets.resolve()) if settings.toolsets is not None else None,
        development_keys=_development_keys(settings, decides=False),
        approver_keys=_development_keys(settings, decides=True),
    )


def _development_keys(settings: Settings, *, decides: bool) -> dict[str, str]:
    """The development keys the raydag takes (none with ``RAYDAG_API_KEYS``), each tenant's, an approver's
    (``decides``) or not."""
    if settings.api_keys is not None:
        return {}
    return {grant.tenant_id: key for key, grant in DEV_API_KEYS.items() if grant.decides == decides}


def run_api(
    settings: Settings, build: Callable[[Settings, str], Any], *, say: Callable[[str], None]
) -> Interrupted:
    """``raydag serve`` until SIGINT or SIGTERM; ``build(settings, dsn)`` is the Serve application. Returns the
    signal that stopped it once everything it started has stopped, and says how long each step of the stop
    took. ``PortTaken`` / ``PortShared`` when it cannot own its port (after stopping what it had started; a
    Serve it found running in a cluster it joined is left as it was). ``ConfigurationError`` before anything
    starts when the API would refuse its keys, or when ``RAYDAG_DATABASE_URL`` does not answer.

    With a Ray of its own, no ``RAYDAG_MCP_URL`` and toolsets that have raydag host a server, the supervisor's
    tool calls go to that server in this process (``tool_server_beside``), not through the Serve proxy to the
    app's ``/mcp`` (which stays, for any other MCP client): the settings ``build`` gets name it as
    ``mcp_url``. Toolsets that host none (servers of your own, over stdio or HTTP) are called where they are."""
    from ray import serve

    settings.api_key_grants()  # ConfigurationError: the development keys off loopback, before anything starts
    own_ray = not os.environ.get("RAY_ADDRESS")
    if own_ray:  # refuse a taken port before starting anything
        ensure_free(settings.host, settings.port)
    steps = Steps()
    stop: Interrupted | None = None
    try:
        with database(settings) as dsn:
            hosting = hosting_in(settings) if own_ray and settings.mcp_url is None else None
            beside = hosting is not None
            tools = tool_server_beside(settings, hosting, dsn) if hosting else nullcontext(settings.mcp_url)
            with tools as mcp_url:
                app_settings = settings.model_copy(update={"mcp_url": mcp_url})
                with local_ray(dashboard=settings.dashboard, setup_hook=SERVE_SETUP_HOOK):
                    started = deployed = False
                    try:
                        started = start_serve(settings)
                        ensure_exclusive(settings.host, settings.port)
                        serve.run(build(app_settings, dsn), name=APP_NAME, route_prefix="/", blocking=False)
                        deployed = True
                        say(
                            f"raydag API on http://{settings.host}:{settings.port}"
                            + (f"; tool calls to {mcp_url}" if beside else "")
                            + "; Ctrl-C or SIGTERM stops it"
                        )
                        with recorded(settings.home_dir, serving_of(settings)):  # until it starts stopping
                            while True:
                                time.sleep(3600)
                    except KeyboardInterrupt as signalled:
                        stop = interrupted(signalled)
                        say(f"{stop.name}: stopping")
                        steps.start()
                        _hand_over_runs(settings)
                        steps.mark("runs handed over")
                    finally:
                        _stop_serve(app=deployed or started, serve_too=started)
                        steps.mark("Serve shut down")
                steps.mark("Ray stopped")
            if beside:
                steps.mark("tool server stopped")
        steps.mark("database stopped")
    except KeyboardInterrupt as signalled:  # during start-up, before Serve ran
        stop = interrupted(signalled)
    assert stop is not None  # serve only returns when a signal stopped it
    say("stopped: " + steps.summary())
    return stop


TOOL_SERVER_START_S = 30.0
"""How long ``tool_server_beside`` waits for its server to listen before it gives up."""


class NothingHosted(Exception):
    """The toolsets declare no server for raydag to host (``hosting.server``)."""


def hosting_in(settings: Settings) -> HostedToolset | None:
    """What the toolsets ``RAYDAG_TOOLSETS`` names (or the shipped ones) have raydag host, when they declare a
    server for it; ``None`` when they host none."""
    from actors.launch.hosting import hosted_server_of
    from actors.launch.local import PLACEHOLDER_URL

    return hosted_server_of(settings.toolset_declarations(PLACEHOLDER_URL))


def hosting_of(settings: Settings) -> HostedToolset:
    """``hosting_in``, or ``NothingHosted`` if the toolsets host no server."""
    hosting = hosting_in(settings)
    if hosting is None:
        raise NothingHosted("the toolsets declare no server for raydag to host (hosting.server)")
    return hosting


def hosted_server(settings: Settings, hosting: HostedToolset, dsn: str, *, audience: str) -> HostedServer:
    """The hosted server as ``RAYDAG_*`` configure it: its database, the token key, the ``audience`` its task
    tokens must name, and the hosts and origins it answers."""
    from actors.launch.hosting import LOOPBACK_HOSTS, LOOPBACK_ORIGINS
    from dag.tokens import TaskTokens

    hosts, origins = settings.mcp_hosts() or (LOOPBACK_HOSTS, LOOPBACK_ORIGINS)
    return hosting.server(
        dsn=dsn,
        tokens=TaskTokens(key=settings.task_token_key(), audience=audience),
        latency_ms=settings.tool_latency_ms,
        pool_size=settings.db_pool_size,
        allowed_hosts=hosts,
        allowed_origins=origins,
    )


@contextmanager
def tool_server_beside(settings: Settings, hosting: HostedToolset, dsn: str) -> Iterator[str]:
    """``hosting``'s server in a thread of this process, on a loopback port of its own (owned exclusively);
    yields its URL. Tool calls to it skip the Serve proxy, which took ~4× the CPU per run of the calls
    themselves (docs/BENCHMARKS.md, "Load through Serve"). On leaving, it stops accepting connections and
    finishes the calls in flight (``RAYDAG_STOP_GRACE_S`` at most)."""
    import uvicorn

    from actors.launch.hosting import MCP_PATH
    from actors.store.setup import prepare_database

    asyncio.run(prepare_database(dsn, schemas=hosting.schemas))  # its tables, before its first call
    sock = bind_exclusively("127.0.0.1", 0, setting="(a free port)")
    url = f"http://127.0.0.1:{sock.getsockname()[1]}{MCP_PATH}"
    server = uvicorn.Server(
        uvicorn.Config(
            hosted_server(settings, hosting, dsn, audience=url).asgi_app(),
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=int(settings.stop_grace_s) or 1,
        )
    )
    # Not the main thread: uvicorn leaves the signals to it, and the stop to should_exit below.
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="raydag-tool-server")
    thread.start()
    try:
        deadline = time.monotonic() + TOOL_SERVER_START_S
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the tool server stopped while starting (see the log above)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the tool server did not start within {TOOL_SERVER_START_S:g}s")
            time.sleep(0.02)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=settings.stop_grace_s + 5)
        sock.close()


def _hand_over_runs(settings: Settings) -> None:
    """Every supervisor of the deployment hands its runs over, all at once (each within the grace period)."""
    import ray

    running = []
    for name in supervisor_names(settings.supervisor_name, settings.supervisors):
        try:
            running.append(ray.get_actor(name, namespace=NAMESPACE))
        except ValueError:
            continue  # the application never started this one: nothing to hand over
    hand_over_all(running, settings.stop_grace_s)
    for supervisor in running:
        # Detached, it would outlive this process in a cluster it joined, refusing runs: the next raydag
        # serve gets a supervisor of the same name anew, which resumes the runs handed over.
        ray.kill(supervisor, no_restart=True)


def _stop_serve(*, app: bool, serve_too: bool) -> None:
    """Delete the application (``app``) and wait for its replicas to finish their requests; then shut Serve
    down if this process started it (``serve_too``)."""
    from ray import serve

    try:
        if app and APP_NAME in serve.status().applications:
            serve.delete(APP_NAME, _blocking=False)
            deadline = time.monotonic() + GRACEFUL_WINDOW_S
            while APP_NAME in serve.status().applications and time.monotonic() < deadline:
                time.sleep(0.25)
    finally:
        if serve_too:
            serve.shutdown()  # type: ignore[no-untyped-call]


def prepare_serve_run(settings: Settings) -> None:
    """What ``serve run serve_app:app`` needs before it starts its application: a Ray (``RAY_ADDRESS``'s
    cluster, else one of its own) with Serve on ``RAYDAG_HOST:RAYDAG_PORT``, owning that port, and SIGTERM
    handled as Ctrl-C. Exits 2 with the reason when the port cannot be owned."""
    import sys

    import ray
    from ray import serve

    from actors.launch.ports import PortShared
    from actors.launch.shutdown import become_subreaper

    become_subreaper()
    ray.init(
        address=os.environ.get("RAY_ADDRESS"),
        namespace="serve",
        runtime_env={"worker_process_setup_hook": SERVE_SETUP_HOOK},
    )
    # Runs before Ray's own atexit shutdown: Serve first, then Ray, then the processes Ray left behind.
    atexit.register(_stop_serve_run)
    try:
        if start_serve(settings):
            atexit.register(serve.shutdown)  # before the Ray is stopped: registered after _stop_serve_run
        ensure_exclusive(settings.host, settings.port)
    except (PortTaken, PortShared) as exc:
        sys.stderr.write(f"raydag: cannot serve: {exc}\n")
        raise SystemExit(2) from None
    catch_stop_signals()  # `serve run` shuts Serve down on KeyboardInterrupt; SIGTERM now raises one too


def _stop_serve_run() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
    stop_descendants()


def serve_tool_server(app: Any, *, host: str, port: int, grace_s: float) -> Interrupted:
    """``raydag mcp``: ``app`` on ``host:port`` (owned exclusively) until SIGINT or SIGTERM; then it stops
    accepting connections, finishes the calls in flight (``grace_s`` at most) and returns the signal."""
    import uvicorn

    sock = bind_exclusively(host, port, setting="--port")
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=int(grace_s) or 1)
    )
    catch_stop_signals()
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt as stop:
        return interrupted(stop)  # uvicorn handled the signal, shut down gracefully, then raised it again
    finally:
        sock.close()
    raise RuntimeError("the tool server stopped without a signal (see its log)")
