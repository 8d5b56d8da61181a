"""Planners for tests, loaded by supervisors through ``SupervisorConfig.planners`` import paths."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from mcp_server.planner import ConformancePlanner
from planner.base import JoinDecision, Observation, PlanningContext

JOIN_DELAY_S = 3.0


class SlowJoinPlanner(ConformancePlanner):
    """The conformance planner, thinking for a while at the join: a window in which to crash the supervisor."""

    name = "slow-join"

    async def decide(self, context: PlanningContext, observations: Sequence[Observation]) -> JoinDecision:
        await asyncio.sleep(JOIN_DELAY_S)
        return await super().decide(context, observations)
