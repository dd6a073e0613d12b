// An OAuth host written with the official TypeScript SDK client and its own OAuth
// client, 2.x (@modelcontextprotocol/client, from MCP_TS_CLIENT2_MODULES) or 1.x
// (@modelcontextprotocol/sdk, from MCP_TOOLS_NODE_MODULES):
//
//   node ts_oauth.mjs URL REDIRECT_URI [--sdk 1|2]
//
// It connects to URL with an OAuthClientProvider; the proxy's 401 sends the SDK to the
// protected-resource metadata, the authorization server's metadata, dynamic client
// registration and an authorization URL, which "the browser" (approve.mjs, headless)
// follows; the code goes back through transport.finishAuth, and a new connection calls
// the tool echo. Prints one JSON line per step: {"authorization_url"}, {"result"} or
// {"error"} (exit 1). Run by tests/test_auth_oauth_clients.py.
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { approve } from "../oauth_as/approve.mjs";

const [url, redirectUri, ...rest] = process.argv.slice(2);
const major = rest.includes("--sdk") ? rest[rest.indexOf("--sdk") + 1] : "2";
const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const load = (root, path) => import(pathToFileURL(join(root, path)).href);

async function sdk() {
  if (major === "2") {
    return load(process.env.MCP_TS_CLIENT2_MODULES, "@modelcontextprotocol/client/dist/index.mjs");
  }
  const esm = "@modelcontextprotocol/sdk/dist/esm/client";
  const root = process.env.MCP_TOOLS_NODE_MODULES;
  const [{ Client }, { StreamableHTTPClientTransport }, { UnauthorizedError }] = await Promise.all([
    load(root, `${esm}/index.js`),
    load(root, `${esm}/streamableHttp.js`),
    load(root, `${esm}/auth.js`),
  ]);
  return { Client, StreamableHTTPClientTransport, UnauthorizedError };
}
const { Client, StreamableHTTPClientTransport, UnauthorizedError } = await sdk();

// What a host keeps between the redirect and the callback, in memory.
const kept = { client: undefined, tokens: undefined, verifier: undefined, redirectedTo: undefined };
const provider = {
  get redirectUrl() {
    return redirectUri;
  },
  get clientMetadata() {
    return {
      client_name: "typescript sdk host",
      redirect_uris: [redirectUri],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  },
  clientInformation: () => kept.client,
  saveClientInformation: (info) => {
    kept.client = info;
  },
  tokens: () => kept.tokens,
  saveTokens: (tokens) => {
    kept.tokens = tokens;
  },
  saveCodeVerifier: (verifier) => {
    kept.verifier = verifier;
  },
  codeVerifier: () => kept.verifier,
  redirectToAuthorization: async (authorizationUrl) => {
    print({ authorization_url: authorizationUrl.href });
    kept.redirectedTo = await approve(authorizationUrl.href);
  },
};

async function connect() {
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  const client = new Client({ name: "ts-oauth-host", version: "0" });
  await client.connect(transport);
  return { client, transport };
}

let client;
try {
  try {
    ({ client } = await connect());
  } catch (error) {
    if (!(error instanceof UnauthorizedError) || !kept.redirectedTo) throw error;
    // Signed in at the authorization server: trade the code, then connect again.
    const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
    const params = new URL(kept.redirectedTo).searchParams;
    await transport.finishAuth(major === "2" ? params : params.get("code"));
    ({ client } = await connect());
  }
  const result = await client.callTool({ name: "echo", arguments: { text: "signed in from typescript" } });
  print({ result: result.content[0].text });
} catch (error) {
  print({ error: `${error?.name ?? "Error"}: ${error?.message ?? error}` });
  process.exitCode = 1;
} finally {
  await client?.close().catch(() => {});
}
