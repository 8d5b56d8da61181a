"""The Ray task that performs one tool call. It holds no state; the supervisor applies its result."""

from __future__ import annotations

import asyncio

import ray

from actors.mcp_client import ToolCall, ToolOutcome, call_tool
from dag.contracts import ToolContract


@ray.remote(num_cpus=0.05, max_retries=0)
def execute_tool_call(call: ToolCall, contract: ToolContract) -> ToolOutcome:
    """Fractional CPUs: tool calls wait on I/O, so many share a core. Retries are the supervisor's decision.

    The contract travels with the call so the worker checks the output against the tool's declared model.
    """
    return asyncio.run(call_tool(call, {contract.name: contract}))
