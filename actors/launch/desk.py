"""Where a script or a command finds and makes a person's decisions without the HTTP API: ``decisions_desk``,
the same ``Decisions`` the API decides through, and ``listing_over``, the same reads as its run list and inbox,
each over a connection of its own to the run store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from actors.launch.settings import Settings
from actors.run.approvals import Decisions
from actors.store.database import create_pool
from actors.store.listing import Listing
from actors.store.operations import OperationStore
from actors.store.questions import QuestionStore
from actors.store.reviews import ReviewStore
from actors.store.runs import RunStore
from actors.store.tool_questions import ToolQuestionStore
from dag.policy import policy_of


@asynccontextmanager
async def decisions_desk(dsn: str, settings: Settings) -> AsyncIterator[Decisions]:
    """``Decisions`` over one connection to ``dsn`` (closed when the block ends), weighing each tenant's
    policy as ``settings`` give it."""
    pool = await create_pool(dsn, max_size=1)
    try:
        yield Decisions(
            RunStore(pool),
            OperationStore(pool),
            ReviewStore(pool),
            QuestionStore(pool),
            policy_of=lambda tenant: policy_of(settings.tenant_policies(), tenant),
            tool_questions=ToolQuestionStore(pool),
        )
    finally:
        await pool.close()


@asynccontextmanager
async def listing_over(dsn: str) -> AsyncIterator[Listing]:
    """The reads behind ``GET /runs`` and ``GET /decisions`` over one connection to ``dsn``, closed when the
    block ends."""
    pool = await create_pool(dsn, max_size=1)
    try:
        yield Listing(pool)
    finally:
        await pool.close()
