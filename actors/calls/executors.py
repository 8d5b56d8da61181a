"""How the supervisor hands a node to be executed: a Ray task per call, a pool of async caller actors, or its
own event loop.

All three return the same outcomes, carry the same per-call token and trace context, and cancel the call when
the supervisor cancels the coroutine; they differ in processes. A Ray task in flight occupies a worker process
of its own (Ray starts them on demand, a few at a time, and reaps idle ones after a second), so many calls at
once mean many processes; a ``ToolCaller`` actor makes hundreds of calls at once in one process; the
supervisor's own loop makes them with no process between it and the tool server. docs/BENCHMARKS.md ("Load
through Serve", "Shipped runtime, CPU per node") has the measurements behind the choice.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, assert_never

from actors.calls.call import HELD_SESSION, STDIO_SESSION, ExecutorKind, ToolCall, ToolExecutor, ToolOutcome
from actors.calls.exchange import (
    DEFAULT_CALLERS,
    EXCHANGES_PER_CALLER,
    calls_per_caller,
    pack,
    unpack,
    worker_failed,
)
from actors.calls.placement import ANYWHERE, spread
from dag.contracts import ToolCatalogue

if TYPE_CHECKING:
    from actors.toolsets.config import HttpServer, StdioServer
    from actors.toolsets.listing import ServerListing


def build_executor(
    kind: ExecutorKind,
    catalogue: ToolCatalogue,
    *,
    callers: int,
    name_prefix: str,
    namespace: str,
    servers: Sequence[HttpServer | StdioServer] = (),
) -> ToolExecutor:
    """The executor ``kind`` names; caller actors are named ``<name_prefix>-<i>`` in ``namespace``.

    ``servers`` are the toolset servers calls may name. Only raydag-token HTTP servers can be reached from a
    Ray task (by URL and token); a stdio server needs a long-lived process to own it, and a server with
    credentials of its own needs them read in the calling process: both need ``callers`` or ``supervisor``.
    """
    placing = [server.name for server in servers if server.placement is not None]
    if placing and kind is not ExecutorKind.CALLERS:
        raise ValueError(
            f"servers {placing} name a placement, which only RAYDAG_TOOL_EXECUTOR=callers honours: their calls "
            "must be made on the nodes they name"
        )
    match kind:
        case ExecutorKind.TASKS:
            needing = [server.name for server in servers if not _reachable_from_a_task(server)]
            if needing:
                raise ValueError(
                    f"servers {needing} need RAYDAG_TOOL_EXECUTOR=callers: a Ray task cannot own a stdio "
                    "server or read a server's own credentials"
                )
            return RayToolExecutor(catalogue)
        case ExecutorKind.CALLERS:
            placed = PlacedCallers.of(
                catalogue, size=callers, name_prefix=name_prefix, namespace=namespace, servers=servers
            )
            placed.start()
            return placed
        case ExecutorKind.SUPERVISOR:
            inline = InlineExecutor(catalogue, servers=servers)
            inline.start()
            return inline
        case _:
            assert_never(kind)


def _reachable_from_a_task(server: HttpServer | StdioServer) -> bool:
    from actors.toolsets.config import HttpServer, RaydagTokenAuth

    return isinstance(server, HttpServer) and isinstance(server.auth, RaydagTokenAuth)


class RayToolExecutor:
    """One Ray task per tool call, named ``tool:<tool>`` for the dashboard (``task_name``)."""

    def __init__(self, catalogue: ToolCatalogue, num_cpus: float = 0.05) -> None:
        self._catalogue = catalogue
        self._num_cpus = num_cpus

    async def run(self, call: ToolCall) -> ToolOutcome:
        import ray
        from ray.exceptions import RayError

        from actors.calls.task import execute_tool_call

        ref = execute_tool_call.options(name=task_name(call.tool), num_cpus=self._num_cpus).remote(
            call, self._catalogue[call.tool]
        )
        started = datetime.now(UTC)
        try:
            outcome: ToolOutcome = await ref
            return outcome
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except RayError as exc:
            return worker_failed(started, exc)


CALLER_REST_S = 5.0
"""How long a caller that failed a call (it died, or is restarting) gets no new calls while others can."""


MAX_NAMED_TOOLS = 3
"""How many tools an exchange's task name lists; the rest are counted."""


def task_name(tool: str) -> str:
    """The dashboard name of a task that calls ``tool``: ``tool:<tool>``.

    Names a tool, never a node or a run: Ray keeps a task counter per distinct task name in every process
    that submits or runs one, for the life of the process. Names that held node ids grew the supervisor's
    memory by ~16–23 KB per 28-node run (docs/BENCHMARKS.md, "The supervisor's memory grew with every run");
    a tool's name is one of the catalogue's."""
    return f"tool:{tool}"


def exchange_name(calls: Sequence[ToolCall]) -> str:
    """The dashboard name of an exchange: ``tool:<tool>`` for each tool it hands calls of over, in name order
    (at most ``MAX_NAMED_TOOLS``, then how many more), or ``tool results`` for one that only collects
    outcomes. As few names as the catalogue allows (``task_name``)."""
    if not calls:
        return "tool results"
    tools = sorted({call.tool for call in calls})
    named = " ".join(task_name(tool) for tool in tools[:MAX_NAMED_TOOLS])
    more = len(tools) - MAX_NAMED_TOOLS
    return f"{named} +{more} more" if more > 0 else named


@dataclass
class _Lane:
    """One caller as the pool sees it: calls waiting to be handed over, calls handed over and not landed, and
    the exchanges in flight."""

    outbox: list[tuple[int, ToolCall]] = field(default_factory=list)
    cancels: list[int] = field(default_factory=list)
    waiting: dict[int, asyncio.Future[ToolOutcome]] = field(default_factory=dict)
    exchanges: int = 0
    flush_due: bool = False


class CallerPoolExecutor:
    """Calls round-robin over ``size`` ``ToolCaller`` actors, handed over in batches.

    A Ray actor call per tool call costs ~1.5–3 ms of CPU between the two processes and ~1 ms of latency each
    (docs/BENCHMARKS.md, "Control-plane cost per node"): sixteen calls ready at once queued ~20 ms behind one
    another before the last one left. So the calls a step makes ready go to each caller in one actor call,
    an *exchange*, which starts them and waits until one of this pool's calls has landed on that caller, then
    brings back every outcome that has. While calls are in flight on a caller, one exchange at least waits
    there: the outcomes of a layer come back in a few exchanges, not one each; a chain's node still costs one.
    Each exchange is an actor task named for the tools of the calls it hands over (``exchange_name``). A
    cancelled call is cancelled in the caller by the next exchange.

    The actors belong to the supervisor that creates them (they end with it), take no CPU reservation beyond
    the sliver that spreads them over a cluster's nodes (they wait on I/O) and are restarted by Ray if their
    process dies; the calls handed to a caller whose exchange fails (it died, or is restarting) become
    ``WORKER_FAILED`` outcomes, as a dead task's does.
    """

    def __init__(
        self,
        catalogue: ToolCatalogue,
        *,
        size: int = DEFAULT_CALLERS,
        max_concurrency: int | None = None,
        name_prefix: str = "raydag-tool-caller",
        namespace: str = "raydag",
        servers: Sequence[HttpServer | StdioServer] = (),
        resources: Mapping[str, float] | None = None,
    ) -> None:
        """``servers``: the toolset servers calls may name; each caller starts its own stdio servers.
        ``max_concurrency``: the calls each caller makes at once (its share of ``CALLS_IN_FLIGHT`` unless
        given). ``resources``: the custom Ray resources each caller takes (its servers' ``placement``)."""
        if size < 1 or (max_concurrency is not None and max_concurrency < 1):
            raise ValueError("a caller pool needs at least one caller, each allowed at least one call")
        self._catalogue = catalogue
        self._max_concurrency = max_concurrency or calls_per_caller(size)
        self._names = [f"{name_prefix}-{index}" for index in range(size)]
        self._namespace = namespace
        self._callers: dict[str, Any] = {}
        self._started: dict[str, Any] = {}
        """Each caller's ``start`` call: done once the actor is up and can take calls."""
        self._next = itertools.cycle(self._names)
        self._servers = tuple(servers)
        self._resting: dict[str, float] = {}
        """Callers whose last exchange failed in Ray (dead or restarting), until when they get no new calls."""
        self._session = uuid.uuid4().hex
        """This pool's calls on the callers: a caller hands each exchange only its own pool's outcomes."""
        self._tickets = itertools.count(1)
        self._lanes = {name: _Lane() for name in self._names}
        self._receiving: set[asyncio.Task[None]] = set()
        self._resources = dict(resources or {})

    @property
    def names(self) -> list[str]:
        return list(self._names)

    def start(self) -> None:
        """Start every caller now, in the background, rather than on its first call: a cold caller takes a
        few hundred ms to start, which the first run's calls would otherwise wait for."""
        for name in self._names:
            self._caller(name)

    async def ready(self, timeout_s: float = 30.0) -> None:
        """Start every caller and wait until each can take calls: a caller's process takes ~0.5–1 s to start
        on two cores, and a first run dispatched before then waits for it, one caller after the other."""
        self.start()
        await asyncio.wait_for(asyncio.gather(*self._started.values()), timeout_s)

    def _caller(self, name: str) -> Any:
        caller = self._callers.get(name)
        if caller is None:
            import ray

            from actors.calls.caller import ToolCaller

            # Over the cluster's nodes, not all beside the supervisor; where the servers' placement names
            # resources, only over the nodes that offer them.
            placement = ANYWHERE if self._resources else spread(self._names.index(name), len(self._names))
            handle: Any = (
                ray.remote(ToolCaller)
                .options(
                    name=name,
                    namespace=self._namespace,
                    get_if_exists=True,
                    # Exchanges wait for outcomes without making calls; the calls are limited by the caller.
                    max_concurrency=EXCHANGES_PER_CALLER,
                    max_restarts=-1,
                    max_task_retries=0,  # retries are the supervisor's decision
                    resources=self._resources,
                    **placement.options(),
                )
                .remote(self._servers, calls_at_once=self._max_concurrency)
            )
            self._started[name] = handle.start.remote()  # its stdio servers start now, not on the first call
            caller = self._callers[name] = handle
        return caller

    async def list_tools(self, server: str, token: str | None) -> ServerListing:
        """What ``server`` lists now, asked of a caller of this pool (where the server may run)."""
        listing: ServerListing = await self._caller(self._pick()).list_tools.remote(server, token)
        return listing

    async def run(self, call: ToolCall) -> ToolOutcome:
        holder = call.task.holder if call.task is not None else None
        name = holder if holder in self._lanes else self._pick()
        outcome = await self._run_on(name, call)
        task = outcome.task
        if (
            task is not None
            and task.session is not None
            and task.session.startswith((STDIO_SESSION, HELD_SESSION))
        ):
            # A stdio server's task lives in this caller's child process, and a plain call its server's question
            # holds open in this caller: only this caller can follow it.
            outcome = replace(outcome, task=replace(task, holder=name))
        return outcome

    async def _run_on(self, name: str, call: ToolCall) -> ToolOutcome:
        lane = self._lanes[name]
        ticket = next(self._tickets)
        landed: asyncio.Future[ToolOutcome] = asyncio.get_running_loop().create_future()
        lane.waiting[ticket] = landed
        lane.outbox.append((ticket, call))
        self._flush_soon(name)
        try:
            return await landed
        except asyncio.CancelledError:
            lane.waiting.pop(ticket, None)
            queued = [entry for entry in lane.outbox if entry[0] != ticket]
            if len(queued) == len(lane.outbox):  # handed over already: the caller must stop it
                lane.cancels.append(ticket)
                self._flush_soon(name)
            elif (
                call.task is not None and not call.stop
            ):  # a task's follow, queued: the task is stopped instead
                queued.append((ticket, replace(call, stop=True, reply=None)))
                self._flush_soon(name)
            lane.outbox = queued
            raise

    def _flush_soon(self, name: str) -> None:
        """Hand the lane's calls over once the calls a step has started have all been queued: they run their
        first steps one after another in this turn of the loop, and the flush comes after them."""
        lane = self._lanes[name]
        if not lane.flush_due:
            lane.flush_due = True
            asyncio.get_running_loop().call_soon(self._flush, name)

    def _flush(self, name: str) -> None:
        from ray.exceptions import RayError

        lane = self._lanes[name]
        lane.flush_due = False
        calls, lane.outbox = lane.outbox, []
        cancels, lane.cancels = lane.cancels, []
        if not calls and not cancels and (lane.exchanges or not lane.waiting):
            return  # an exchange waits for the calls in flight already, or none are
        handed = [call for _, call in calls]
        contracts = {call.tool: self._catalogue[call.tool] for call in handed}
        upto = max(lane.waiting, default=0)  # everything waiting has been handed over by now
        try:
            ref = (
                self._caller(name)
                .packed_exchange.options(name=exchange_name(handed))
                .remote(pack((self._session, calls, contracts, cancels)))
            )
        except RayError as exc:
            self._callers.pop(name, None)
            self._fail(name, exc, upto=upto)
            return
        lane.exchanges += 1
        receiving = asyncio.ensure_future(self._receive(name, ref, upto=upto))
        self._receiving.add(receiving)
        receiving.add_done_callback(self._receiving.discard)

    async def _receive(self, name: str, ref: Any, *, upto: int) -> None:
        """Deliver what an exchange brings back; if calls are still in flight there and no other exchange
        waits for them, send one that does. ``upto``: the last ticket handed over by the time it was sent."""
        from ray.exceptions import ActorDiedError

        lane = self._lanes[name]
        try:
            landed: list[tuple[int, ToolOutcome]] = unpack(await ref)
        except Exception as exc:  # failed in Ray, or an answer this process cannot unpack: the calls are lost
            if isinstance(exc, ActorDiedError):  # gone for good (not restarting): the next call makes another
                self._callers.pop(name, None)
            self._fail(name, exc, upto=upto)
            landed = []
        finally:
            lane.exchanges -= 1
        for ticket, outcome in landed:
            future = lane.waiting.pop(ticket, None)
            if future is not None and not future.done():
                future.set_result(outcome)
        if lane.waiting and not lane.exchanges:
            self._flush_soon(name)

    def _fail(self, name: str, exc: BaseException, *, upto: int) -> None:
        """The calls handed to ``name`` up to ticket ``upto`` are lost with its process: ``WORKER_FAILED``."""
        self._rest(name)
        lane = self._lanes[name]
        queued = {ticket for ticket, _ in lane.outbox}
        started = datetime.now(UTC)
        for ticket in [ticket for ticket in lane.waiting if ticket <= upto and ticket not in queued]:
            future = lane.waiting.pop(ticket)
            if not future.done():
                future.set_result(worker_failed(started, exc))

    def _pick(self) -> str:
        """The next caller in turn that is not resting after a failure; any caller if all of them are."""
        clock = time.monotonic()
        for _ in self._names:
            name = next(self._next)
            if self._resting.get(name, 0.0) <= clock:
                return name
        return next(self._next)

    def _rest(self, name: str) -> None:
        self._resting[name] = time.monotonic() + CALLER_REST_S


class PlacedCallers:
    """Caller pools by placement: a pool of its own (``<prefix>-<server>-<i>``) for each server whose
    ``placement`` limits the nodes it may run on, the shared pool for the others. A call goes to the pool of
    its tool's server; a stdio server starts only in its own pool's callers."""

    def __init__(self, shared: CallerPoolExecutor, placed: Mapping[str, CallerPoolExecutor]) -> None:
        self._shared = shared
        self._placed = dict(placed)

    @classmethod
    def of(
        cls,
        catalogue: ToolCatalogue,
        *,
        size: int,
        name_prefix: str,
        namespace: str,
        servers: Sequence[HttpServer | StdioServer],
    ) -> PlacedCallers:
        shared = CallerPoolExecutor(
            catalogue,
            size=size,
            name_prefix=name_prefix,
            namespace=namespace,
            servers=[server for server in servers if server.placement is None],
        )
        placed = {
            server.name: CallerPoolExecutor(
                catalogue,
                size=size,
                name_prefix=f"{name_prefix}-{server.name}",
                namespace=namespace,
                servers=(server,),
                resources=server.placement.resources,
            )
            for server in servers
            if server.placement is not None
        }
        return cls(shared, placed)

    @property
    def pools(self) -> list[CallerPoolExecutor]:
        return [self._shared, *self._placed.values()]

    @property
    def names(self) -> list[str]:
        return [name for pool in self.pools for name in pool.names]

    def handles(self) -> dict[str, Any]:
        """Every caller started so far, by name."""
        return {name: pool._caller(name) for pool in self.pools for name in pool.names}

    def placed(self, server: str) -> bool:
        """Whether ``server``'s calls (and listings) are made only by callers on the nodes it names."""
        return server in self._placed

    def start(self) -> None:
        for pool in self.pools:
            pool.start()

    async def ready(self, timeout_s: float = 30.0) -> None:
        """Every caller up. A placed pool no node can host yet is not waited for: its calls wait for a node."""
        await self._shared.ready(timeout_s)
        for pool in self._placed.values():
            pool.start()

    async def list_tools(self, server: str, token: str | None) -> ServerListing:
        return await self._placed[server].list_tools(server, token)

    async def run(self, call: ToolCall) -> ToolOutcome:
        return await self._placed.get(call.server or "", self._shared).run(call)


class InlineExecutor:
    """Calls made in the event loop of the process that runs it (the supervisor's), over one
    ``McpConnections``.

    A call costs no Ray actor call each way (~1 ms of latency and of CPU on each side, docs/BENCHMARKS.md) and
    no process of its own; in exchange every call's client work, an output's parsing included, is done on the
    supervisor's one core, beside its control plane. Its stdio servers are child processes of this process.
    Build it on the loop it will serve.
    """

    def __init__(self, catalogue: ToolCatalogue, *, servers: Sequence[HttpServer | StdioServer] = ()) -> None:
        from actors.calls.mcp import McpConnections

        self._catalogue = catalogue
        self._connections = McpConnections(servers, hold_questions=True)

    def start(self) -> None:
        """Start the stdio servers now, in the background, rather than on their first call."""
        self._connections.start()

    async def run(self, call: ToolCall) -> ToolOutcome:
        from actors.calls.mcp import call_tool

        return await call_tool(call, self._catalogue, self._connections)

    async def aclose(self) -> None:
        """Stop the stdio servers and close the connections."""
        await self._connections.aclose()
