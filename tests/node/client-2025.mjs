// Lists and calls a tool with the TypeScript SDK v1 (@modelcontextprotocol/sdk) over 2025-11-25 (initialize).
// In: MCP_URL, MCP_TOKEN, MCP_TOOL, MCP_ARGS (JSON) in the environment. Out: one JSON line on stdout.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const { MCP_URL, MCP_TOKEN, MCP_TOOL, MCP_ARGS } = process.env;
const client = new Client({ name: 'raydag-interop-2025', version: '1.0.0' });
const transport = new StreamableHTTPClientTransport(new URL(MCP_URL), {
  requestInit: { headers: { Authorization: `Bearer ${MCP_TOKEN}` } },
});
await client.connect(transport);
const listed = await client.listTools();
const result = await client.callTool({ name: MCP_TOOL, arguments: JSON.parse(MCP_ARGS) });
console.log(
  JSON.stringify({
    protocolVersion: transport.protocolVersion,
    tools: listed.tools.map((tool) => tool.name),
    result,
  }),
);
await client.close();
