"""The caseops MCP tool server. Importing this package loads no MCP or database code:
``mcp_server.contracts`` and ``mcp_server.tokens`` are shared with the runtime."""
