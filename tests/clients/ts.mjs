// Client driver: the official TypeScript SDK, 1.x (@modelcontextprotocol/sdk) or 2.x
// (@modelcontextprotocol/client), over Streamable HTTP, with the SDK's default settings
// (its default reconnectionOptions included). The command line and the output are those of
// tests/clients/driver_io.py:
//
//   node ts.mjs URL TOOL ARGS_JSON --era legacy|modern|auto --sdk 1|2 [--timeout SECONDS]
//
// 1.x speaks the legacy era only; 2.x maps --era to versionNegotiation.mode ("legacy",
// {pin: "2026-07-28"}, "auto"). The SDK is imported by absolute path: 1.x from
// MCP_TOOLS_NODE_MODULES through tests/e2e/ts/sdk.mjs, 2.x from MCP_TS_CLIENT2_MODULES.
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { print, sdk, text as textOf } from "../e2e/ts/sdk.mjs";

const [url, tool, argsJson, ...rest] = process.argv.slice(2);
const option = (name, fallback) => {
  const i = rest.indexOf(name);
  return i >= 0 ? rest[i + 1] : fallback;
};
const era = option("--era", "auto");
const major = option("--sdk", "1");
const timeoutMs = Number(option("--timeout", "30")) * 1000; // driver_io.CALL_TIMEOUT_S

const load = (root, path) => import(pathToFileURL(join(root, path)).href);

async function connect() {
  if (major === "1") {
    if (era !== "legacy") throw new Error(`the 1.x SDK has no ${era} era`);
    const { Client } = await sdk("client/index.js");
    const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
    const client = new Client({ name: "matrix-ts1", version: "0" });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    return client;
  }
  const modules = process.env.MCP_TS_CLIENT2_MODULES;
  const { Client, StreamableHTTPClientTransport } = await load(
    modules,
    "@modelcontextprotocol/client/dist/index.mjs",
  );
  const mode = { legacy: "legacy", modern: { pin: "2026-07-28" }, auto: "auto" }[era];
  const client = new Client({ name: "matrix-ts2", version: "0" }, { versionNegotiation: { mode } });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

let client;
try {
  client = await connect();
  const options = {
    timeout: timeoutMs,
    onprogress: ({ progress }) => print({ progress }),
  };
  const params = { name: tool, arguments: JSON.parse(argsJson) };
  const result =
    major === "1"
      ? await client.callTool(params, undefined, options)
      : await client.callTool(params, options);
  if (result.isError) throw new Error(`tool error: ${textOf(result).slice(0, 200)}`);
  const text = textOf(result);
  print({ result: text.slice(0, 80), bytes: text.length });
} catch (error) {
  print({ error: `${error?.name ?? "Error"}: ${error?.message ?? error}` });
  process.exitCode = 1;
} finally {
  await client?.close().catch(() => {});
}
