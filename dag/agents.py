"""Agent nodes: what a child run may be given (tools, depth, budgets) and what its parent sees of its result.

An agent node (``PlanNode.agent``) is a child run of its own. Its parent decides, here and nowhere else, the
child's tools (at most the parent's, narrowed by the node), whether its depth is allowed, its budgets (carved
from what the parent has left) and the bounded form its result takes as the node's output: data, never
instructions.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import JsonValue

from dag.budget import BudgetRequest, Budgets, RequestBound
from dag.errors import BudgetExceeded, RaydagError
from dag.events import ErrorKind, NodeError
from dag.plan import AgentSpec
from dag.policy import Decision
from dag.run_state import RunState
from dag.scheduler import Ready

AGENT_DEPTH_LIMIT = 3
"""How deep agent nodes may nest by default: a run's children are depth 1, their children depth 2, …"""
AGENT_DEPTH_CAP = 8
"""The deepest any setting may allow: each level is a run of its own, with its own records."""
RESULT_LIMIT_BYTES = 64 * 1024
"""The most UTF-8 bytes of compact JSON a child's result may take in its parent's node output; a larger one is
cut and flagged (``truncated``), never silently."""

CARVED = ("max_nodes", "max_tokens", "max_cost_usd", "deadline_s")
"""The budgets a child spends from its parent's: what it is given is at most what the parent has left."""


class AgentRefusal(StrEnum):
    """Why a child run may not start: its parent's node fails with this code."""

    TOOL_NOT_OFFERED = "AGENT_TOOL_NOT_OFFERED"
    TOO_DEEP = "AGENT_TOO_DEEP"
    NOTHING_LEFT = "AGENT_BUDGET_EXHAUSTED"
    MODEL_NOT_ALLOWED = "AGENT_MODEL_NOT_ALLOWED"
    """The node names a model its child's planner may not ask for its tenant (``dag.admission.model_refusal``)."""
    FIRST_CALL_UNAFFORDABLE = "AGENT_FIRST_CALL_UNAFFORDABLE"
    """What the child was carved does not cover the worst case of its first model call (``check_first_call``)."""


class AgentRefused(RaydagError):
    """A child run was refused before it started; the plan (or the operator's depth setting) must change."""

    def __init__(self, code: AgentRefusal, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def node_error(self) -> NodeError:
        """How the agent node fails: its code, of the kind that says who must act."""
        return NodeError(kind=_ERROR_KIND[self.code], code=self.code.value, message=self.message)


def child_tools(offered: Collection[str], asked: Sequence[str] | None) -> frozenset[str]:
    """The child's tools: ``asked`` (``None``: all the parent's), each of which the parent must be offered."""
    if asked is None:
        return frozenset(offered)
    outside = sorted(set(asked) - set(offered))
    if outside:
        names = ", ".join(repr(name[:80]) for name in outside[:5])
        raise AgentRefused(
            AgentRefusal.TOOL_NOT_OFFERED,
            f"the agent asks for tools its parent run is not offered: {names}",
        )
    return frozenset(asked)


def check_depth(depth: int, limit: int) -> None:
    """Raise ``AgentRefused`` if a child at ``depth`` (the parent's depth + 1) is deeper than ``limit``."""
    if depth > limit:
        raise AgentRefused(
            AgentRefusal.TOO_DEEP,
            f"an agent at depth {depth} is deeper than the {limit} agent levels allowed",
        )


@dataclass(frozen=True)
class Spent:
    """What a run has used of its carved budgets so far."""

    nodes: int
    tokens: int
    cost_usd: float
    active_s: float
    reserved_tokens: int = 0
    """Tokens carved for children in flight: held from what is left until each ends."""
    reserved_cost_usd: float = 0.0


def carve(
    budgets: Budgets, spent: Spent, asked: BudgetRequest | None, *, plans: bool, share: int = 1
) -> Budgets:
    """A child's budgets: each carved budget ``min(asked, what the parent has left)``, every other one
    ``min(asked, the parent's)``; of the tokens and cost left (besides what children in flight hold), a
    ``share``-th, the child sharing them with siblings starting beside it. ``plans``: the child's DAG is written
    by a model, which needs tokens and cost. Raises ``AgentRefused(NOTHING_LEFT)`` when the parent has nothing
    left the child needs to start."""
    left: dict[str, float] = {
        "max_nodes": budgets.max_nodes - spent.nodes,
        "max_tokens": (budgets.max_tokens - spent.tokens - spent.reserved_tokens) // share,
        "max_cost_usd": round((budgets.max_cost_usd - spent.cost_usd - spent.reserved_cost_usd) / share, 6),
        "deadline_s": round(budgets.deadline_s - spent.active_s, 3),
    }
    needed = ["max_nodes", "deadline_s", *(("max_tokens", "max_cost_usd") if plans else ())]
    exhausted = [name for name in needed if left[name] <= 0]
    if exhausted:
        detail = ", ".join(f"{name} {max(left[name], 0):g} left" for name in exhausted)
        raise AgentRefused(AgentRefusal.NOTHING_LEFT, f"the parent run cannot afford the agent: {detail}")
    requested = asked.model_dump(exclude_none=True) if asked is not None else {}
    given: dict[str, Any] = {}
    for name in type(budgets).model_fields:
        ceiling = max(left[name], 0) if name in CARVED else getattr(budgets, name)
        value = min(requested.get(name, ceiling), ceiling)
        given[name] = int(value) if isinstance(getattr(budgets, name), int) else float(value)
    # What it asked for may be nothing: a model child given no tokens or cost would pay its first call, then stop.
    unaffordable = [name for name in needed if given[name] <= 0]
    if unaffordable:
        detail = ", ".join(f"{name} {given[name]:g}" for name in unaffordable)
        raise AgentRefused(AgentRefusal.NOTHING_LEFT, f"the agent is given nothing to start with: {detail}")
    return Budgets.model_validate(given)


def check_first_call(budgets: Budgets, first_call: RequestBound) -> None:
    """Raise ``AgentRefused(FIRST_CALL_UNAFFORDABLE)`` if a child carved ``budgets`` could not pay for the worst
    case of its first model call (``first_call``): refused before it makes it, rather than stopped after."""
    try:
        budgets.check_before_request(tokens=0, cost_usd=0.0, request=first_call)
    except BudgetExceeded as exc:
        raise AgentRefused(
            AgentRefusal.FIRST_CALL_UNAFFORDABLE,
            f"the agent cannot afford its first model call: it may take up to {first_call.describe()}, and "
            f"the agent is given max_tokens {budgets.max_tokens} and max_cost_usd {budgets.max_cost_usd:g} "
            f"({exc.budget} falls short)",
        ) from None


def bounded_result(
    child_run_id: str, result: JsonValue, *, limit: int = RESULT_LIMIT_BYTES
) -> dict[str, Any]:
    """The agent node's output: the child's result as data, flagged ``truncated`` (and then the first ``limit``
    bytes of its compact JSON, as a string, with its full size) when it is larger than ``limit``."""
    text = json.dumps(result, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    encoded = text.encode()
    if len(encoded) <= limit:
        return {"run_id": child_run_id, "result": result, "truncated": False}
    cut = encoded[:limit].decode(errors="ignore")  # never half a character
    return {
        "run_id": child_run_id,
        "result": cut,
        "truncated": True,
        "size_bytes": len(encoded),
        "limit_bytes": limit,
    }


AGENT_DECISION = Decision(
    allowed=True,
    rule_id="allow.agent_child_run",
    reason="an agent node runs as a child run under the same principal; each of its calls is authorized there",
)
"""What an agent node is dispatched under: the node itself calls nothing; its child's calls meet the policy."""


@dataclass(frozen=True)
class StartAgent:
    """Start the agent node's child run: ``ready`` holds its resolved inputs; ``budgets`` were carved from the
    parent's, ``tools`` narrowed from the parent's, ``depth`` is the child's; ``continues``, the child run of the
    identical node in a run the parent continues that did not complete: the new child continues it if it may."""

    ready: Ready
    agent: AgentSpec
    budgets: Budgets
    tools: frozenset[str]
    depth: int
    decision: Decision = AGENT_DECISION
    continues: str | None = None

    @property
    def reserved(self) -> tuple[int, float]:
        """The tokens and cost its parent holds for it while it runs: all it was given, if it may ask a model
        (a child that asks none spends none)."""
        if not self.agent.may_ask_models:
            return 0, 0.0
        return self.budgets.max_tokens, self.budgets.max_cost_usd


@dataclass(frozen=True)
class AwaitSiblings:
    """What the parent has left of tokens or cost is held by child runs in flight: the agent node starts when
    one ends and gives back what it did not spend (it is refused if it still cannot start then)."""

    node_id: str


_ERROR_KIND = {
    AgentRefusal.TOOL_NOT_OFFERED: ErrorKind.AUTHORIZATION,
    AgentRefusal.TOO_DEEP: ErrorKind.CONTRACT,
    AgentRefusal.NOTHING_LEFT: ErrorKind.CONTRACT,
    AgentRefusal.MODEL_NOT_ALLOWED: ErrorKind.AUTHORIZATION,
    AgentRefusal.FIRST_CALL_UNAFFORDABLE: ErrorKind.CONTRACT,
}


def start_agent(
    state: RunState,
    ready: Ready,
    agent: AgentSpec,
    offered: Collection[str],
    *,
    depth_limit: int,
    at: datetime,
    share: int = 1,
    held: tuple[int, float] = (0, 0.0),
) -> StartAgent | AwaitSiblings | NodeError:
    """The child run an agent node of ``state`` may start at ``at``, or why it may not (its node fails so):
    its tools at most ``offered`` (the parent's own), its depth within ``depth_limit``, its budgets carved from
    what the parent has left, and its inline plan calling none but its tools. Should the identical node's child
    in a run ``state``'s continues not have completed, the child is to continue it (``StartAgent.continues``).

    Tokens and cost are never promised twice: what the children in flight were carved (and ``held``, what
    siblings decided in the same step were) is not left; a child that may ask a model takes a ``share``-th of
    the rest, shared with the siblings starting beside it, else all of it; one that could start were the
    children in flight done waits for them (``AwaitSiblings``)."""
    try:
        depth = state.depth + 1
        check_depth(depth, depth_limit)
        tools = child_tools(offered, agent.tools)
        if agent.plan is not None:
            child_tools(tools, [node.tool for node in agent.plan.nodes if node.agent is None])
        in_flight = state.reserved_for_children(besides=ready.node_id)
        spent = Spent(
            nodes=state.node_count(),
            tokens=state.tokens_used,
            cost_usd=state.cost_usd,
            active_s=state.active_s(at),
            reserved_tokens=in_flight[0] + held[0],
            reserved_cost_usd=in_flight[1] + held[1],
        )
        budgets = _carved(state.budgets, spent, agent, share)
    except AgentRefused as exc:
        return exc.node_error()
    if budgets is None:
        return AwaitSiblings(ready.node_id)
    earlier = state.carried_children.get(ready.fingerprint)
    continues = earlier.child_run_id if earlier is not None else None
    return StartAgent(ready, agent, budgets, tools, depth, continues=continues)


def _carved(budgets: Budgets, spent: Spent, agent: AgentSpec, share: int) -> Budgets | None:
    """``carve``'s budgets for ``agent``: a ``share``-th of the tokens and cost left, else all that is left;
    ``None`` when only the children in flight stand in the way (raises the refusal if even their end would
    not do)."""
    refused: AgentRefused | None = None
    for split in (share, 1) if agent.may_ask_models and share > 1 else (1,):
        try:
            return carve(budgets, spent, agent.budgets, plans=agent.planned, share=split)
        except AgentRefused as exc:
            refused = exc
    assert refused is not None
    if not (spent.reserved_tokens or spent.reserved_cost_usd):
        raise refused
    unheld = replace(spent, reserved_tokens=0, reserved_cost_usd=0.0)
    carve(budgets, unheld, agent.budgets, plans=agent.planned)  # raises if their end would not do either
    return None
