// Lists and calls a tool with the TypeScript SDK v2 (@modelcontextprotocol/client) pinned to 2026-07-28.
// In: MCP_URL, MCP_TOKEN, MCP_TOOL, MCP_ARGS (JSON) in the environment (never argv: a token in argv is visible
// to every user of the machine). Out: one JSON line {protocolVersion, tools, result} on stdout.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const { MCP_URL, MCP_TOKEN, MCP_TOOL, MCP_ARGS } = process.env;
const client = new Client(
  { name: 'raydag-interop-2026', version: '1.0.0' },
  { versionNegotiation: { mode: { pin: '2026-07-28' } } },
);
const transport = new StreamableHTTPClientTransport(new URL(MCP_URL), {
  requestInit: { headers: { Authorization: `Bearer ${MCP_TOKEN}` } },
});
await client.connect(transport);
const listed = await client.listTools();
const result = await client.callTool({ name: MCP_TOOL, arguments: JSON.parse(MCP_ARGS) });
console.log(
  JSON.stringify({
    protocolVersion: client.getNegotiatedProtocolVersion(),
    tools: listed.tools.map((tool) => tool.name),
    result,
  }),
);
await client.close();
