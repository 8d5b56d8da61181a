"""What every run a supervisor drives shares (``RunDeps``): built once where the supervisor composes its service,
and handed down whole — service, driver, round — as pydantic-ai hands its graph's nodes ``ctx.deps``.

A run's own state (its id, plan, budgets, cancellation, deadline) is not here: it travels as the run's recorder
and the round's arguments.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from actors.calls.call import MODERN_PROTOCOL, ToolExecutor
from actors.observe.metrics import NO_METRICS, RunMetrics
from actors.toolsets.config import HttpServer, RaydagTokenAuth, StdioServer
from actors.toolsets.pinning import run_pin
from actors.toolsets.withdrawal import Withdrawal
from dag.agents import AGENT_DEPTH_LIMIT
from dag.contracts import ToolCatalogue, ToolContract
from dag.evidence import DEFINITION_CHANGED_RULE
from dag.health import ToolHealth
from dag.retry import RetryPolicy
from dag.states import StopReason
from dag.tokens import TaskTokens
from planner.base import Planner

CALL_SLACK_S = 5.0
"""How long past a tool's timeout a call may take (queueing for a worker) before the supervisor gives up."""


@dataclass
class ToolEndpoint:
    """The MCP server a tool without a toolset server of its own is called at (``url``), and the tokens calls
    are minted with (``tokens``: its audience is ``url``; its key mints for ``raydag-token`` toolset servers too).

    The one part of ``RunDeps`` a redeployment changes in place (``RunService.reconfigure``): every call made
    from then on, in runs already under way too, goes to the new server with the new key."""

    url: str
    tokens: TaskTokens


@dataclass(frozen=True)
class RunDeps:
    """The dependencies every run of one supervisor shares: how its calls run and where they go, the tools and
    planners offered, the judges of failure, and the clocks of retries."""

    executor: ToolExecutor
    """How a node's call runs (caller actors, Ray tasks, or in the supervisor's own loop)."""
    catalogue: ToolCatalogue
    """The tools offered now, by name: a live view the supervisor keeps current as it lists its servers."""
    planners: Mapping[str, Planner]
    """The planners offered, by name: a run's ``planner`` names one."""
    endpoint: ToolEndpoint
    """The default tool server and the tokens calls carry (changed in place by a redeployment)."""
    servers: Mapping[str, HttpServer | StdioServer] = field(default_factory=dict)
    """The toolset servers a contract's ``server`` names: where its calls go, and with which credentials."""
    withdrawn: Mapping[str, Withdrawal] = field(default_factory=dict)
    """Declared tools that may not be called now (server unreachable, definition changed since pinned): a live
    view, like ``catalogue``."""
    pins: Mapping[str, str] = field(default_factory=dict)
    """Tool → the digest of the definition this supervisor pinned (compared with what a run recorded): a live
    view, like ``catalogue``."""
    health: ToolHealth = field(default_factory=ToolHealth)
    """Each tool's circuit: a fact about the tools, shared by every run."""
    metrics: RunMetrics = NO_METRICS
    """Where the runs' transitions are counted."""
    protocol: str = MODERN_PROTOCOL
    """The MCP protocol version calls speak."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """How long a failed call waits before it is tried again, and whether it is."""
    rng: random.Random = field(default_factory=random.Random)
    """The jitter of retry backoffs (seeded by tests)."""
    call_slack_s: float = CALL_SLACK_S
    """How long past a tool's timeout a call may take before the supervisor gives up (``CALL_SLACK_S``)."""
    agent_depth: int = AGENT_DEPTH_LIMIT
    """How deep agent nodes' child runs may nest (0: no agent node runs)."""

    def agent_levels(self, depth: int) -> int | None:
        """How many agent levels a plan of a run at ``depth`` may nest (``None``: agent nodes are refused)."""
        return self.agent_depth - depth if self.agent_depth > 0 else None

    def withdrawal(self, tool: str, recorded: Mapping[str, str] | None) -> Withdrawal | None:
        """Why a node of ``tool`` may not be called now, or ``None``. ``recorded``: the run's own pins — a
        run created under another listing of the tool (before a restart, by another supervisor) is held to
        the definition it started with."""
        withdrawn = self.withdrawn.get(tool)
        if withdrawn is not None:
            return withdrawn
        pinned = recorded.get(tool) if recorded is not None else None
        current = self.pins.get(tool)
        if pinned is not None and current is not None and run_pin(current) != pinned:
            return Withdrawal(
                DEFINITION_CHANGED_RULE,
                StopReason.TOOL_DEFINITION_CHANGED,
                f"tool {tool!r} is listed with another definition than when this run was created "
                f"(pinned {pinned}, listed {run_pin(current)})",
            )
        return None

    def destination(self, contract: ToolContract) -> tuple[str, TaskTokens | None]:
        """The URL a call of ``contract`` is sent to and the tokens it is minted with (``None``: the server
        takes no raydag token, the call carries none)."""
        spec = self.servers.get(contract.server) if contract.server is not None else None
        tokens = self.endpoint.tokens
        if spec is None:
            return self.endpoint.url, tokens
        if isinstance(spec, HttpServer) and isinstance(spec.auth, RaydagTokenAuth):
            if spec.url == tokens.audience:
                return spec.url, tokens
            return spec.url, TaskTokens(key=tokens.key, audience=spec.url)
        return "", None

    def call_limit_s(self, contract: ToolContract) -> float:
        """How long a call of ``contract`` may take before the supervisor gives up on it: its timeout and the
        slack for queueing. Past it, a call that was out can no longer land."""
        return contract.timeout_s + self.call_slack_s

    def observed_fields(self) -> frozenset[str]:
        return frozenset().union(*(contract.observed_bound for contract in self.catalogue.values()))
