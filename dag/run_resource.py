"""A run's resource: what the run is about, as a few string keys to string values.

``{"case_id": "C-102"}`` for a caseops run, ``{"root": "/srv/reports"}`` for a file-system one. Tools bind
their run-bound inputs to its keys (``ToolContract.run_bindings``); the policy checks every such argument
against it. Here: the shape a resource may have, and whether a resource fits the tools a run would use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dag.contracts import ToolContract

Resource = Mapping[str, str]
"""What a run is about: ``{"case_id": "C-102"}``, ``{"root": "/srv/reports"}``."""

MAX_RESOURCE_KEYS = 16
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
"""A resource value given bare (the API's ``case_id`` shorthand, a line of a batch file): letters, digits and
``_.:-``, up to 64, starting with a letter or digit."""
MAX_RESOURCE_KEY_LENGTH = 64
MAX_RESOURCE_VALUE_LENGTH = 1024
RESOURCE_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
"""A resource key reads like a field name: it names the key a tool's binding refers to."""


@dataclass(frozen=True)
class ResourceMismatch:
    """Why a resource does not fit the tools of a run: keys a tool needs that it lacks, keys no tool uses."""

    missing: Mapping[str, tuple[str, ...]]
    """Each missing key, with the tools that bind an input to it."""
    unused: tuple[str, ...]

    @property
    def message(self) -> str:
        parts = [
            f"the resource lacks {key!r}, which {', '.join(tools)} bind{'s' if len(tools) == 1 else ''} an input to"
            for key, tools in self.missing.items()
        ]
        if self.unused:
            parts.append(f"no tool of the run uses the resource's {', '.join(map(repr, self.unused))}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "missing": {key: list(tools) for key, tools in self.missing.items()},
            "unused": list(self.unused),
        }


def missing_resource_keys(contract: ToolContract, resource: Resource) -> tuple[str, ...]:
    """The resource keys ``contract`` binds its run-bound inputs to that ``resource`` lacks, sorted."""
    return tuple(sorted(contract.resource_keys_needed - resource.keys()))


def resource_mismatch(
    resource: Resource, tools: Mapping[str, ToolContract], planned: Iterable[str] | None = None
) -> ResourceMismatch | None:
    """``None`` if ``resource`` fits the run's tools, else what does not.

    ``tools`` are the tools the run may use; ``planned`` the tools of the plan a requester gave, if one was.
    With a plan, every key its tools need must be there, and every key must be used by one of them. Without
    one (a planner writes the plan), a tool whose keys are missing is simply not offered; a key that none of
    ``tools`` uses is still a mistake of the requester's.
    """
    used_by = {name: tools[name] for name in (planned if planned is not None else tools) if name in tools}
    missing: dict[str, list[str]] = {}
    if planned is not None:
        for name, contract in sorted(used_by.items()):
            for key in missing_resource_keys(contract, resource):
                missing.setdefault(key, []).append(name)
    needed = frozenset().union(*(contract.resource_keys_needed for contract in used_by.values()))
    unused = tuple(sorted(resource.keys() - needed))
    if not missing and not unused:
        return None
    return ResourceMismatch({key: tuple(names) for key, names in sorted(missing.items())}, unused)


@dataclass(frozen=True)
class ResourceAnswer:
    """A toolset's answer to "may this principal run over this resource": a value, like a policy decision.

    A refusal is answered as ``problem`` (a problem type slug, answered with 404) and ``detail``; a check
    makes the answer for a resource that does not exist and one that is not the principal's the same, so
    that existence does not leak.
    """

    allowed: bool
    problem: str = "resource-not-found"
    detail: str = "no such resource was found"


RESOURCE_ALLOWED = ResourceAnswer(allowed=True, problem="", detail="")
