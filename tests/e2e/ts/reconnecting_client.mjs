// The official TypeScript SDK client (@modelcontextprotocol/sdk) calling one long tool through
// the proxy, relying on the SDK's own automatic reconnection (reconnectionOptions): when the
// call's SSE stream is cut or closed by the server before the response, the transport
// reconnects with GET + Last-Event-ID (2025-11-25 transports, "Resumability and Redelivery").
//
// Usage: node reconnecting_client.mjs URL TOOL ARGS_JSON
// Environment: MCP_TOOLS_NODE_MODULES = the node_modules holding the SDK (see sdk.mjs).
//
// Prints one JSON object per line on stdout, in the order things happen:
//   {"http": {"method", "lastEventId", "rpc", "status"}}  each HTTP request and its status
//   {"progress": P, "total": T}                           each notifications/progress
//   {"result": TEXT}                                      the tool result's text
//   {"closed": true}                                      after close and DELETE
// Errors the transport reports go to stderr; a failed call prints {"error": MESSAGE} and
// exits 1.
import { print, sdk, text } from "./sdk.mjs";

const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { CallToolResultSchema } = await sdk("types.js");

const [url, tool, argsJson] = process.argv.slice(2);

// Every HTTP request the transport makes, with the JSON-RPC method of a POST.
async function loggingFetch(input, init) {
  const headers = new Headers(init?.headers);
  let rpc = null;
  if (typeof init?.body === "string") {
    try {
      rpc = JSON.parse(init.body).method ?? "response";
    } catch {
      rpc = "unparsable";
    }
  }
  const entry = {
    method: init?.method ?? "GET",
    lastEventId: headers.get("last-event-id"),
    rpc,
    status: null,
  };
  try {
    const response = await fetch(input, init);
    entry.status = response.status;
    return response;
  } finally {
    print({ http: entry });
  }
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  fetch: loggingFetch,
  reconnectionOptions: {
    initialReconnectionDelay: 50,
    maxReconnectionDelay: 1000,
    reconnectionDelayGrowFactor: 1.5,
    maxRetries: 20,
  },
});
const client = new Client({ name: "mcp-resume-proxy-ts-e2e", version: "0" });
client.onerror = (error) => console.error(`transport error: ${error?.message ?? error}`);

try {
  await client.connect(transport);
  const result = await client.callTool(
    { name: tool, arguments: JSON.parse(argsJson) },
    CallToolResultSchema,
    {
      timeout: 60_000,
      onprogress: ({ progress, total }) => print({ progress, total }),
    },
  );
  print({ result: text(result) });
  // Close first (it aborts the standalone GET stream, which would otherwise reconnect after
  // the session is gone), then end the session with DELETE ourselves.
  const sessionId = transport.sessionId;
  const protocolVersion = transport.protocolVersion;
  await client.close();
  await loggingFetch(url, {
    method: "DELETE",
    headers: { "mcp-session-id": sessionId, "mcp-protocol-version": protocolVersion },
  });
  print({ closed: true });
} catch (error) {
  print({ error: String(error?.message ?? error) });
  await client.close().catch(() => {});
  process.exitCode = 1;
}
