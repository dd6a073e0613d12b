// The official TypeScript SDK client (@modelcontextprotocol/sdk) over its own
// WebSocketClientTransport (subprotocol "mcp") against the proxy's /ws endpoint.
//
// Usage: node websocket_client.mjs WS_URL STEPS
// Environment: MCP_TOOLS_NODE_MODULES = the node_modules holding the SDK.
// Prints JSON lines: {"tools": [...]}, {"echo": TEXT}, {"progress": P}, {"result": TEXT},
// {"closed": true}; a failure prints {"error": MESSAGE} and exits 1.
import { print, sdk, text } from "./sdk.mjs";

const { Client } = await sdk("client/index.js");
const { WebSocketClientTransport } = await sdk("client/websocket.js");
const { CallToolResultSchema } = await sdk("types.js");

const [url, steps] = process.argv.slice(2);

const client = new Client({ name: "ts-websocket-e2e", version: "0" });
try {
  await client.connect(new WebSocketClientTransport(new URL(url)));
  const tools = await client.listTools();
  print({ tools: tools.tools.map((t) => t.name).sort() });
  print({ echo: text(await client.callTool({ name: "echo", arguments: { text: "over ws" } })) });
  const result = await client.callTool(
    { name: "slow", arguments: { steps: Number(steps), delay: 0.05 } },
    CallToolResultSchema,
    { onprogress: (p) => print({ progress: p.progress }) },
  );
  print({ result: text(result) });
  await client.close();
  print({ closed: true });
} catch (error) {
  print({ error: String(error?.message ?? error) });
  process.exit(1);
}
