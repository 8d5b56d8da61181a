"""raydag's MCP client: how a node's call reaches a tool server and comes back as a classified outcome.

- ``connections``: ``McpConnections`` (the connections a caller keeps, per server and era) and ``call_tool``;
- ``session``: opening SDK sessions in either protocol era, listing tools;
- ``stateless_post``: the 2026-07-28 fast path, one hand-built POST per call;
- ``stdio`` and ``stdio_guardian``: a stdio server as a child process of the caller that uses it.
"""

from actors.mcp_client.connections import McpConnections, ToolCall, ToolOutcome, call_tool
from actors.mcp_client.stateless_post import MODERN_PROTOCOL

__all__ = ["MODERN_PROTOCOL", "McpConnections", "ToolCall", "ToolOutcome", "call_tool"]
