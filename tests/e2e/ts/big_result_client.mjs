// A TypeScript SDK client, with its default settings, calling the `big` tool of
// tests/fixtures/legacy_server.py through the proxy: large tool results (issue 20).
//
//   node big_result_client.mjs SDK URL CALLS_JSON
//
// SDK: "1" = @modelcontextprotocol/sdk 1.x (MCP_TOOLS_NODE_MODULES, .tools/node_modules),
//      "2" = @modelcontextprotocol/client 2.x (MCP_TS_CLIENT2_MODULES, .tools/ts-client2).
// CALLS_JSON: [{"size": N, "delay": S}, ...], called one after the other.
// Output, one JSON object per line: {"era": PROTOCOL_VERSION} once connected, then per call
// {"size", "length", "sha256", "ms"} or {"size", "error"}, then {"done": true}.
// Every HTTP request is noted on stderr (method, Last-Event-ID, status): a resume shows there.
import { createHash } from "node:crypto";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [which, url, callsJson] = process.argv.slice(2);
const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const text = (result) => result.content.map((block) => block.text ?? "").join("");

async function load() {
  if (which === "1") {
    const base = join(process.env.MCP_TOOLS_NODE_MODULES, "@modelcontextprotocol/sdk/dist/esm");
    const mod = (path) => import(pathToFileURL(join(base, path)).href);
    const { Client } = await mod("client/index.js");
    const { StreamableHTTPClientTransport } = await mod("client/streamableHttp.js");
    return { Client, StreamableHTTPClientTransport };
  }
  const entry = "@modelcontextprotocol/client/dist/index.mjs";
  return import(pathToFileURL(join(process.env.MCP_TS_CLIENT2_MODULES, entry)).href);
}

async function loggingFetch(input, init) {
  const headers = new Headers(init?.headers);
  const response = await fetch(input, init);
  const last = headers.get("last-event-id");
  console.error(`${init?.method ?? "GET"} last-event-id=${last} -> ${response.status}`);
  return response;
}

const { Client, StreamableHTTPClientTransport } = await load();
const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: loggingFetch });
const client = new Client({ name: "big-result-ts-e2e", version: "0" });
client.onerror = (error) => console.error(`transport error: ${error?.message ?? error}`);
let failed = false;
try {
  await client.connect(transport);
  print({ era: transport.protocolVersion ?? null });
  for (const { size, delay } of JSON.parse(callsJson)) {
    const started = Date.now();
    try {
      const result = await client.callTool(
        { name: "big", arguments: { size, delay } },
        undefined,
        { timeout: 120_000 },
      );
      const body = text(result);
      const sha256 = createHash("sha256").update(body).digest("hex");
      print({ size, length: body.length, sha256, ms: Date.now() - started });
    } catch (error) {
      failed = true;
      print({ size, error: String(error?.message ?? error) });
    }
  }
} catch (error) {
  failed = true;
  print({ error: String(error?.message ?? error) });
} finally {
  await client.close().catch(() => {});
}
print({ done: true });
process.exit(failed ? 1 : 0);
