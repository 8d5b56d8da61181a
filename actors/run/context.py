"""What every round of every run shares (``ExecutionContext``: how to call tools, and the judges of failure),
why a round ended early (``Interruption``), and a run handed over by a stopping supervisor (``HandedOver``)."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from actors.calls.call import ToolExecutor
from actors.run.operate import Operate
from actors.toolsets.config import HttpServer, RaydagTokenAuth, StdioServer
from actors.toolsets.pinning import run_pin
from actors.toolsets.withdrawal import Withdrawal
from dag.contracts import ToolCatalogue, ToolContract
from dag.errors import RaydagError
from dag.evidence import DEFINITION_CHANGED_RULE
from dag.health import ToolHealth
from dag.policy import RunAuthority
from dag.retry import RetryPolicy
from dag.run_state import RunState
from dag.states import StopReason
from dag.tokens import TaskTokens


@dataclass(frozen=True)
class Interruption:
    """Why a round ended before its DAG drained."""

    reason: StopReason
    detail: str


class HandedOver(RaydagError):
    """The supervisor is shutting down: the run stops being driven here, unfinished and still owned, so that
    a supervisor of the same name (after a restart) or any other (once the lease lapses) resumes it."""


class Parked(RaydagError):
    """The run waits for people and for nothing else, and was recorded so (``RunParked``): it stops being
    driven, owned by nobody, until a decision about it or its first wait's deadline wakes it."""

    def __init__(self, run_id: str, waits: tuple[str, ...]) -> None:
        super().__init__(f"run {run_id} waits for people: {', '.join(waits)}")
        self.run_id = run_id
        self.waits = waits
        """What it waits on, as ``RunParked`` names it (``operation:<id>``, ``review:<round>``, …)."""


@dataclass
class ExecutionContext:
    """What every round of every run shares: how to call tools, and the judges of failure."""

    executor: ToolExecutor
    catalogue: ToolCatalogue
    tokens: TaskTokens
    mcp_url: str
    protocol: str
    health: ToolHealth
    retry: RetryPolicy
    rng: random.Random
    call_slack_s: float = 5.0
    """How long past a tool's timeout a call may take (queueing for a worker) before the supervisor gives up."""
    servers: Mapping[str, HttpServer | StdioServer] = field(default_factory=dict)
    """The toolset servers a contract's ``server`` names: where its calls go, and with which credentials."""
    withdrawn: Mapping[str, Withdrawal] = field(default_factory=dict)
    """Declared tools that may not be called now (server unreachable, definition changed since pinned)."""
    pins: Mapping[str, str] = field(default_factory=dict)
    """Tool → the digest of the definition this supervisor pinned (compared with what a run recorded)."""
    operate: Operate | None = None
    """How a write node acts, through the operation ledger (``None``: no ledger, so no write is called)."""

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
        if spec is None:
            return self.mcp_url, self.tokens
        if isinstance(spec, HttpServer) and isinstance(spec.auth, RaydagTokenAuth):
            if spec.url == self.tokens.audience:
                return spec.url, self.tokens
            return spec.url, TaskTokens(key=self.tokens.key, audience=spec.url)
        return "", None

    def call_limit_s(self, contract: ToolContract) -> float:
        """How long a call of ``contract`` may take before the supervisor gives up on it: its timeout and the
        slack for queueing. Past it, a call that was out can no longer land."""
        return contract.timeout_s + self.call_slack_s

    def authority(self, state: RunState) -> RunAuthority:
        return state.authority

    def observed_fields(self) -> frozenset[str]:
        return frozenset().union(*(contract.observed_bound for contract in self.catalogue.values()))
