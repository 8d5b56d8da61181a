"""Resource checks: a toolset's answer to who may run over which resource, asked before a run is created.

A server of a toolsets file may name one (``resource_check``): a Python callable by import path, or one of
its own tools. A server without one leaves the question to the policy: every call of a run is still checked
against the run's resource, and the tools answer for what exists.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from actors.store.resilience import REQUEST_WINDOW_S, retrying
from actors.toolsets.config import Toolsets, imported_callable
from dag.contracts import ToolCatalogue, ToolContract
from dag.errors import RaydagError
from dag.policy import Principal
from dag.run_resource import RESOURCE_ALLOWED, Resource, ResourceAnswer

if TYPE_CHECKING:
    from actors.calls.call import ToolOutcome

ResourceCheck = Callable[[Principal, Resource], Awaitable[ResourceAnswer]]
"""Whether ``principal`` may run over ``resource``."""
CallTool = Callable[[Principal, Resource, ToolContract, dict[str, Any]], Awaitable["ToolOutcome"]]
"""How a check calls a tool for a principal (a token minted for it, as for a node of a run)."""


class ResourceCheckUnavailable(RaydagError):
    """A check could not answer (its tool failed without an answer): nothing was accepted, retry later."""


def resource_checks(
    toolsets: Toolsets, catalogue: ToolCatalogue, *, database: Any, call_tool: CallTool
) -> dict[str, ResourceCheck]:
    """Each tool's server's check, by tool name; the tools of a server without one are absent."""
    checks: dict[str, ResourceCheck] = {}
    for server in toolsets.servers:
        spec = server.resource_check
        if spec is None:
            continue
        if spec.callable is not None:
            check = _callable_check(spec.callable, database)
        else:
            assert spec.tool is not None
            check = _tool_check(spec.tool, catalogue, call_tool)
        checks.update(dict.fromkeys(server.tools, check))
    return checks


def _callable_check(path: str, database: Any) -> ResourceCheck:
    function = imported_callable(path)

    async def check(principal: Principal, resource: Resource) -> ResourceAnswer:
        answer = await retrying(
            lambda: function(principal=principal, resource=resource, database=database),
            window_s=REQUEST_WINDOW_S,
            what=f"resource check {path}",
        )
        if not isinstance(answer, ResourceAnswer):
            raise TypeError(f"resource check {path} answered {type(answer).__name__}, not a ResourceAnswer")
        return answer

    return check


def _tool_check(tool: str, catalogue: ToolCatalogue, call_tool: CallTool) -> ResourceCheck:
    """A check by ``tool``, looked up in ``catalogue`` when it runs: the supervisor's catalogue fills in as
    its servers are listed, so a check whose server has not been listed yet cannot answer (yet)."""

    async def check(principal: Principal, resource: Resource) -> ResourceAnswer:
        contract = catalogue.get(tool)
        if contract is None:
            raise ResourceCheckUnavailable(f"resource check {tool}: its server has not been listed")
        bindings = contract.run_bindings
        if any(binding.resource_key not in resource for binding in bindings):
            return ResourceAnswer(allowed=False)
        args = {binding.field: resource[binding.resource_key] for binding in bindings}
        outcome = await call_tool(principal, resource, contract, args)
        if outcome.error is None:
            return RESOURCE_ALLOWED
        if outcome.error.infrastructure:
            raise ResourceCheckUnavailable(f"resource check {contract.name} failed: {outcome.error.code}")
        return ResourceAnswer(allowed=False)  # any refusal of the tool: the resource is not this principal's

    return check


def checks_for(checks: Mapping[str, ResourceCheck], tools: list[str]) -> list[ResourceCheck]:
    """The distinct checks of the servers of ``tools``, in the order of their first tool."""
    found: dict[int, ResourceCheck] = {}
    for tool in tools:
        check = checks.get(tool)
        if check is not None:
            found.setdefault(id(check), check)
    return list(found.values())
