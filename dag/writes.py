"""What the operator declares for a write tool (its overlay's ``operation``): who approves, how the operation id
reaches the tool, how to find out whether an effect exists, and what makes two proposals one intent. Read by
``dag.contracts`` (a contract carries its tool's declaration) and ``dag.operations`` (which decides with it)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Approval(StrEnum):
    """Who says yes to an operation before it executes."""

    POLICY = "policy"
    """The policy that authorized the node approves it: it executes at once."""
    PERSON = "person"
    """A person with ``runs:approve`` must approve its exact arguments; the run waits meanwhile."""


class KeyCarrier(StrEnum):
    """How the operation id reaches the tool as its idempotency key."""

    ARGUMENT = "argument"
    """As an argument the overlay names; raydag sets it (a planner never sees or writes it)."""
    META = "meta"
    """In the request's ``_meta``, under ``META_KEY``: the arguments stay exactly the planner's."""
    NONE = "none"
    """Not at all: the tool cannot tell a repeat. (raydag never tries a write twice either way.)"""


@dataclass(frozen=True)
class Reconcile:
    """How to find out whether an operation's effect exists: a read tool of the same toolset.

    ``arguments`` pairs each of the read's arguments to where its value comes from: the name of one of the
    operation's arguments, or ``$operation_id``. How the read's output says the effect exists is one of:
    ``exists``, a field that is ``true`` when it does and ``false`` when it does not; or ``matches``, a
    (read's output field, write's argument) pair: the effect exists when the field holds what the write was
    sent (a file's content), and does not when the read answers something else. Anything else, and a read
    that fails, cannot tell.
    """

    tool: str
    arguments: tuple[tuple[str, str], ...]
    """(read's argument, source) pairs: hashable, as a contract must be."""
    exists: str | None = None
    matches: tuple[str, str] | None = None
    output: str | None = None
    """The field of the read's output that holds what the write answers (caseops' lookup holds the request it
    finds): the node of a write confirmed by reconciling ends with it, as if the write had answered."""


META_KEY: Final = "io.raydag/operation-id"
"""The ``_meta`` entry of a write's ``tools/call`` that carries its operation id, with ``KeyCarrier.META``."""
META_CARRIER: Final = "_meta"
"""What an overlay's ``idempotency_key`` says to carry the operation id in ``_meta`` rather than an argument."""

OPERATION_ID_SOURCE: Final = "$operation_id"
"""The ``Reconcile.arguments`` source that stands for the operation id (the tool's idempotency key)."""


@dataclass(frozen=True)
class Intent:
    """What makes two proposals of a write the same business operation (its overlay's ``operation.intent``).

    Two proposals of the same tool in the same tenant are one operation when their ``arguments`` hold the same
    values, whichever runs propose them: the later ones join the first (docs/EFFECTS.md). By default every
    argument names the intent, and an intent that succeeded stays the same operation forever; an overlay may
    narrow it to some arguments and give it a ``window_s``, past which a success is history and the same intent
    is a new operation (a reminder sent a day later)."""

    arguments: tuple[str, ...] | None = None
    """The arguments whose values name the intent, sorted; ``None``: all of them."""
    window_s: float | None = None
    """How long after it succeeded an intent is still the same operation; ``None``: forever. An intent not yet
    settled (waiting for a person, executing, unknown) is always joined, whatever its age."""


@dataclass(frozen=True)
class OperationSpec:
    """What the operator declared for one write tool (its overlay's ``operation``)."""

    approval: Approval = Approval.PERSON
    key: KeyCarrier = KeyCarrier.NONE
    key_argument: str | None = None
    """The argument that carries the key, with ``KeyCarrier.ARGUMENT``."""
    reconcile: Reconcile | None = None
    approval_window_s: float | None = None
    """How long an operation of this tool waits for a person before it expires, if shorter than the run's
    ``approval_wait_s`` (``None``: the run's)."""
    compensate: str | None = None
    """The write tool that undoes this one's effect, if any: compensating is an operation of its own."""
    intent: Intent = Intent()
    """What makes another proposal of this tool the same operation (by default: the same arguments)."""
