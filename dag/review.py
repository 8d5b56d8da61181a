"""Plan review: a person's yes to a plan, bound to its exact text, before any of it runs.

A run created with review on (asked for, or required by its tenant's policy) dispatches nothing of a round
until a person with the review scope has approved that round's plan, quoting its hash. A replan waits again
only for what is new: a node whose call (tool, arguments, fan-out) an earlier yes already covered does not
need another. A rejection ends the run; a review nobody decides in time expires and ends it too.

This module holds the values and the decisions; the store keeps the rows (``actors.store.reviews``), the
driver waits on them (``actors.run.driver``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from dag.fingerprint import sha256_hex
from dag.plan import Plan, PlanNode
from dag.policy import TenantPolicy

REVIEW_SCOPE = "runs:review"
"""The scope a person needs to approve or reject a run's plan."""


class ReviewState(StrEnum):
    AWAITING = "awaiting"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class ReviewRefusal(StrEnum):
    """Why a decision on a plan was refused: each its own problem type."""

    NOT_FOUND = "review-not-found"
    HASH_MISMATCH = "review-hash-mismatch"
    EXPIRED = "review-expired"
    ALREADY_DECIDED = "review-already-decided"
    SELF_REVIEW = "review-self-approval"


def plan_hash(plan: Mapping[str, Any]) -> str:
    """SHA-256 of the plan's canonical JSON: what a reviewer quotes. Any change to the plan changes it."""
    return sha256_hex(dict(plan))


def call_signature(node: PlanNode) -> str:
    """What a yes to ``node`` covers: its tool, arguments and fan-out, not its name or its ordering."""
    return sha256_hex(
        {
            "tool": node.tool,
            "args": node.args,
            "for_each": node.for_each.model_dump(mode="json") if node.for_each else None,
        }
    )


def unreviewed(plan: Plan, approved: Iterable[str]) -> tuple[str, ...]:
    """The ids of ``plan``'s nodes whose calls no earlier yes covered (``approved``: their signatures)."""
    covered = frozenset(approved)
    return tuple(node.id for node in plan.nodes if call_signature(node) not in covered)


@dataclass(frozen=True)
class ReviewView:
    """What a decision on a plan is weighed on: one review as the store holds it."""

    state: ReviewState
    plan_hash: str
    subject: str
    """The run's own principal, who asked for the run."""
    expires_at: datetime


def review_refusal(
    review: ReviewView, *, quoted_hash: str, reviewer: str, policy: TenantPolicy, now: datetime
) -> ReviewRefusal | None:
    """Why ``reviewer`` may not decide ``review`` quoting ``quoted_hash`` at ``now``, or ``None``.

    The hash is weighed first: a yes to another plan is no yes to this one. The run's own principal reviews
    only where its tenant's ``policy`` lets requesters review their own plans (by default not)."""
    if quoted_hash != review.plan_hash:
        return ReviewRefusal.HASH_MISMATCH
    if review.state is ReviewState.EXPIRED or (
        review.state is ReviewState.AWAITING and now >= review.expires_at
    ):
        return ReviewRefusal.EXPIRED
    if review.state is not ReviewState.AWAITING:
        return ReviewRefusal.ALREADY_DECIDED
    if reviewer == review.subject and not policy.self_review:
        return ReviewRefusal.SELF_REVIEW
    return None
