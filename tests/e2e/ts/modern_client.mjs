// The official TypeScript SDK 2.x client (@modelcontextprotocol/client) in 2026-07-28
// ("modern") mode, against the proxy in front of tests/fixtures/modern_probe_server.py.
//
//   node modern_client.mjs URL
//
// The package is imported by absolute path from MCP_TS_CLIENT2_MODULES
// (.tools/ts-client2/node_modules, scripts/install-ts-client2.sh; ESM ignores NODE_PATH).
// Output: one JSON object per line, {"step": NAME, "ok": true, ...} or
// {"step": NAME, "ok": false, "error": "..."} for each step (the same steps as
// tests/e2e/modern_py_client.py), then {"done": true}. A failed step does not stop the others.
//
// What the SDK does by itself (2.4.0):
// - versionNegotiation { mode: { pin: "2026-07-28" } }: connect() sends server/discover and
//   must get a 2026-07-28 DiscoverResult (no fallback to initialize); every request then
//   carries the _meta envelope and MCP-Protocol-Version / Mcp-Method / Mcp-Name headers.
// - MRTR: an input_required result is fulfilled through the handler registered with
//   setRequestHandler("elicitation/create") and the call retried with inputResponses +
//   requestState (inputRequired.autoFulfill, on by default).
// - listen(filter) is subscriptions/listen; change notifications reach the handlers set with
//   setNotificationHandler; close() aborts the stream (and posts notifications/cancelled).
// - aborting a request's signal on a modern connection aborts its POST (closes the stream).
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.MCP_TS_CLIENT2_MODULES;
if (!modules) {
  console.error("MCP_TS_CLIENT2_MODULES is not set (run scripts/install-ts-client2.sh)");
  process.exit(2);
}
const { Client, StreamableHTTPClientTransport } = await import(
  pathToFileURL(join(modules, "@modelcontextprotocol/client/dist/index.mjs")).href
);

const url = process.argv[2];
if (!url) {
  console.error("usage: node modern_client.mjs URL");
  process.exit(2);
}

const MODERN = "2026-07-28";
const COUNTER_URI = "probe://counter";
const BASE_TOOLS = ["echo", "ask", "hang", "hang_status", "add_tool", "bump", "events"];
const ANSWER = "blue";
const QUESTION = "Which colour? (ts)";
const SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId";
const SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo";
const STEP_DEADLINE_MS = 30_000;
const EVENT_DEADLINE_MS = 15_000;
const SLOW_CALL_S = 1.5; // longer than the proxy's tasks.after_ms in the test
const CLIENT_INFO = { name: "modern-ts-e2e", version: "0" };

const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
const text = (result) => result.content.map((block) => block.text ?? "").join("");
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const describe = (error) =>
  error instanceof Error ? `${error.name}: ${error.message}` : String(error);

class StepFailed extends Error {
  name = "StepFailed";
}
function expect(condition, message) {
  if (!condition) throw new StepFailed(message);
}

function withDeadline(promise, ms, what) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new StepFailed(`${what}: no outcome in ${ms} ms`)), ms);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

async function step(name, body) {
  try {
    const details = await withDeadline(Promise.resolve().then(body), STEP_DEADLINE_MS, name);
    print({ step: name, ok: true, ...(details ?? {}) });
  } catch (error) {
    print({ step: name, ok: false, error: describe(error) });
    if (!(error instanceof StepFailed)) console.error(error);
  }
}

// Every HTTP exchange, from the transport's fetch.
const wire = [];
const recordingFetch = async (input, init) => {
  const headers = new Headers(init?.headers ?? {});
  const entry = {
    method: init?.method ?? "GET",
    mcp_method: headers.get("mcp-method"),
    mcp_name: headers.get("mcp-name"),
    protocol_version: headers.get("mcp-protocol-version"),
    session_id_sent: headers.get("mcp-session-id"),
  };
  try {
    const body = JSON.parse(init?.body ?? "null");
    entry.rpc = body?.method ?? null;
    entry.id = body?.id ?? null;
  } catch {
    entry.rpc = null;
  }
  wire.push(entry);
  let response;
  try {
    response = await fetch(input, init);
  } catch (error) {
    entry.aborted = init?.signal?.aborted === true;
    entry.error = describe(error);
    throw error;
  }
  entry.status = response.status;
  entry.content_type = response.headers.get("content-type");
  entry.session_id_received = response.headers.get("mcp-session-id");
  return response;
};

// Change notifications, as the handlers saw them.
const notifications = [];
const waiters = new Set();
function onNotification(method) {
  return (notification) => {
    const seen = {
      method,
      uri: notification.params?.uri,
      subscriptionId: notification.params?._meta?.[SUBSCRIPTION_ID_KEY],
    };
    notifications.push(seen);
    for (const waiter of waiters) waiter(seen);
  };
}
function nextNotification(wanted) {
  const already = notifications.find(wanted);
  if (already) return Promise.resolve(already);
  return withDeadline(
    new Promise((resolve) => {
      const waiter = (seen) => {
        if (wanted(seen)) {
          waiters.delete(waiter);
          resolve(seen);
        }
      };
      waiters.add(waiter);
    }),
    EVENT_DEADLINE_MS,
    "the change notification",
  );
}

const elicitations = [];
function modernClient(mode) {
  const client = new Client(CLIENT_INFO, {
    capabilities: { elicitation: { form: {} } },
    versionNegotiation: { mode },
  });
  client.setRequestHandler("elicitation/create", async (request) => {
    elicitations.push(request.params.message);
    return { action: "accept", content: { answer: ANSWER } };
  });
  client.setNotificationHandler(
    "notifications/tools/list_changed",
    onNotification("notifications/tools/list_changed"),
  );
  client.setNotificationHandler(
    "notifications/resources/updated",
    onNotification("notifications/resources/updated"),
  );
  return client;
}

let client;
let connectError;
try {
  client = modernClient({ pin: MODERN });
  const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch });
  await withDeadline(client.connect(transport), STEP_DEADLINE_MS, "connect");
} catch (error) {
  connectError = error;
  if (!(error instanceof StepFailed)) console.error(error);
}
const connected = () => {
  if (connectError !== undefined) throw new StepFailed(`not connected: ${describe(connectError)}`);
  return client;
};

await step("connect", async () => {
  const c = connected();
  expect(c.getProtocolEra() === "modern", `era ${c.getProtocolEra()}`);
  const version = c.getNegotiatedProtocolVersion();
  expect(version === MODERN, `version ${version}`);
  const probe = wire.find((x) => x.rpc === "server/discover");
  expect(probe !== undefined, "connect() sent no server/discover");
  return {
    protocol_version: c.getNegotiatedProtocolVersion(),
    server_version: c.getServerVersion() ?? null,
  };
});

await step("discover", async () => {
  const c = connected();
  const result = await c.discover();
  const versions = result.supportedVersions;
  expect(versions.includes(MODERN), `supportedVersions ${versions}`);
  const caps = result.capabilities ?? {};
  expect(caps.tools && caps.prompts && caps.resources, `capabilities ${JSON.stringify(caps)}`);
  const serverInfo = result._meta?.[SERVER_INFO_KEY];
  expect(serverInfo !== undefined, "no _meta io.modelcontextprotocol/serverInfo");
  return {
    supported_versions: result.supportedVersions,
    capabilities: caps,
    server_info: serverInfo,
    ttl_ms: result.ttlMs,
    cache_scope: result.cacheScope,
  };
});

await step("auto_mode", async () => {
  const auto = modernClient("auto");
  await auto.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    expect(auto.getProtocolEra() === "modern", `auto mode chose ${auto.getProtocolEra()}`);
    const echo = await auto.callTool({ name: "echo", arguments: { text: "auto" } });
    expect(text(echo) === "auto", `echo answered ${JSON.stringify(text(echo))}`);
    return { protocol_version: auto.getNegotiatedProtocolVersion() };
  } finally {
    await auto.close();
  }
});

await step("tools", async () => {
  const c = connected();
  const listed = await c.listTools(undefined, { cacheMode: "refresh" });
  const names = listed.tools.map((tool) => tool.name);
  expect(
    BASE_TOOLS.every((name) => names.includes(name)),
    `tools/list gave ${JSON.stringify(names)}`,
  );
  const echo = await c.callTool({ name: "echo", arguments: { text: "hello modern" } });
  expect(text(echo) === "hello modern", `echo answered ${JSON.stringify(text(echo))}`);
  return { tools: names.sort(), ttl_ms: listed.ttlMs, cache_scope: listed.cacheScope };
});

await step("prompts", async () => {
  const c = connected();
  const listed = await c.listPrompts(undefined, { cacheMode: "refresh" });
  const names = listed.prompts.map((prompt) => prompt.name);
  expect(names.includes("greet"), `prompts/list gave ${JSON.stringify(names)}`);
  const got = await c.getPrompt({ name: "greet", arguments: { name: "Ada" } });
  const texts = got.messages.map((message) => message.content.text);
  expect(JSON.stringify(texts) === JSON.stringify(["Hello, Ada!"]), `got ${texts}`);
  return { prompts: names, messages: texts };
});

await step("resources", async () => {
  const c = connected();
  const listed = await c.listResources(undefined, { cacheMode: "refresh" });
  const uris = listed.resources.map((resource) => resource.uri);
  expect(uris.includes(COUNTER_URI) && uris.includes("probe://readme"), `listed ${uris}`);
  const read = await c.readResource({ uri: "probe://readme" }, { cacheMode: "refresh" });
  const texts = read.contents.map((content) => content.text);
  expect(texts.length === 1 && texts[0].includes("modern probe"), `read ${texts}`);
  return { resources: uris, text: texts[0], ttl_ms: read.ttlMs };
});

await step("elicitation", async () => {
  const c = connected();
  const before = elicitations.length;
  const result = await c.callTool({ name: "ask", arguments: { question: QUESTION } });
  const asked = elicitations.slice(before);
  expect(JSON.stringify(asked) === JSON.stringify([QUESTION]), `the handler was asked ${asked}`);
  expect(text(result) === ANSWER, `ask answered ${JSON.stringify(text(result))}`);
  return { asked, answer: text(result) };
});

// A call longer than the façade's tasks.after_ms (1000): this client does not declare the
// Tasks extension, so it must get the plain result, never a task.
await step("slow_call", async () => {
  const c = connected();
  const token = `ts-slow-${Math.random().toString(16).slice(2, 10)}`;
  const result = await c.callTool({ name: "hang", arguments: { token, seconds: SLOW_CALL_S } });
  expect(text(result) === `slept ${SLOW_CALL_S}`, `hang answered ${JSON.stringify(text(result))}`);
  return { answer: text(result) };
});

let subscription;
let listenError;
try {
  subscription = await connected().listen(
    { toolsListChanged: true, resourceSubscriptions: [COUNTER_URI] },
    { timeout: STEP_DEADLINE_MS },
  );
} catch (error) {
  listenError = error;
  if (!(error instanceof StepFailed)) console.error(error);
}
const subscribed = () => {
  if (listenError !== undefined) throw new StepFailed(`no subscription: ${describe(listenError)}`);
  return subscription;
};
const listenId = wire.find((x) => x.rpc === "subscriptions/listen")?.id;

await step("listen_ack", async () => {
  const sub = subscribed();
  const honored = sub.honoredFilter;
  expect(honored.toolsListChanged === true, `honored ${JSON.stringify(honored)}`);
  const uris = honored.resourceSubscriptions ?? [];
  expect(uris.includes(COUNTER_URI), `honored ${JSON.stringify(honored)}`);
  return { subscription_id: listenId, honored };
});

await step("listen_tools_changed", async () => {
  const c = connected();
  subscribed();
  const name = `extra_ts_${Math.random().toString(16).slice(2, 10)}`;
  const from = notifications.length;
  await c.callTool({ name: "add_tool", arguments: { name } });
  const seen = await nextNotification(
    (n) => notifications.indexOf(n) >= from && n.method === "notifications/tools/list_changed",
  );
  expect(seen.subscriptionId === listenId, `stamped with subscription ${seen.subscriptionId}`);
  const listed = await c.listTools(undefined, { cacheMode: "refresh" });
  const names = listed.tools.map((tool) => tool.name);
  expect(names.includes(name), `${name} not in tools/list after the change: ${names}`);
  return { added: name };
});

await step("listen_resource_updated", async () => {
  const c = connected();
  subscribed();
  const from = notifications.length;
  const bumped = text(await c.callTool({ name: "bump", arguments: {} }));
  const seen = await nextNotification(
    (n) =>
      notifications.indexOf(n) >= from &&
      n.method === "notifications/resources/updated" &&
      n.uri === COUNTER_URI,
  );
  expect(seen.subscriptionId === listenId, `stamped with subscription ${seen.subscriptionId}`);
  const read = await c.readResource({ uri: COUNTER_URI }, { cacheMode: "refresh" });
  const texts = read.contents.map((content) => content.text);
  expect(JSON.stringify(texts) === JSON.stringify([bumped]), `counter ${texts}, bump ${bumped}`);
  return { counter: bumped };
});

await step("listen_close", async () => {
  const c = connected();
  const sub = subscribed();
  await sub.close();
  const cause = await withDeadline(sub.closed, EVENT_DEADLINE_MS, "closed");
  expect(cause === "local", `closed with ${cause}`);
  const cancel = wire.find((x) => x.rpc === "notifications/cancelled");
  const echo = await c.callTool({ name: "echo", arguments: { text: "after listen" } });
  expect(text(echo) === "after listen", `echo answered ${JSON.stringify(text(echo))}`);
  return { cause, cancelled_notification_status: cancel?.status ?? null };
});

await step("cancel", async () => {
  const c = connected();
  const token = `ts-${Math.random().toString(16).slice(2, 10)}`;
  const status = async () =>
    JSON.parse(text(await c.callTool({ name: "hang_status", arguments: { token } })));
  const statusHas = async (event) => {
    const deadline = Date.now() + EVENT_DEADLINE_MS;
    while (Date.now() < deadline) {
      const events = await status();
      if (events.some((e) => e.event === event)) return events;
      await sleep(100);
    }
    throw new StepFailed(`no ${event} for ${token} upstream in ${EVENT_DEADLINE_MS} ms`);
  };
  const abort = new AbortController();
  const outcome = c
    .callTool(
      { name: "hang", arguments: { token, seconds: 60 } },
      { signal: abort.signal, timeout: 120_000 },
    )
    .then(
      (result) => ({ answered: text(result) }),
      (error) => ({ rejected: describe(error) }),
    );
  try {
    await statusHas("hang_started");
  } finally {
    abort.abort("the test cancels the call"); // closes the call's response stream
  }
  const ended = await withDeadline(outcome, EVENT_DEADLINE_MS, "the cancelled call");
  expect(ended.rejected !== undefined, `the call ended ${JSON.stringify(ended)}`);
  const events = await statusHas("hang_cancelled");
  return {
    token,
    outcome: ended,
    started: events.filter((e) => e.event === "hang_started"),
    cancelled: events.filter((e) => e.event === "hang_cancelled"),
  };
});

await step("wire", async () => {
  connected();
  // A request aborted before its response headers came (the cancel step) has no status.
  const mine = wire.filter((x) => x.rpc !== "notifications/cancelled" && !x.aborted);
  const notPost = wire.filter((x) => x.method !== "POST");
  expect(notPost.length === 0, `non-POST requests: ${JSON.stringify(notPost)}`);
  const sessions = wire.filter((x) => x.session_id_sent || x.session_id_received);
  expect(sessions.length === 0, `Mcp-Session-Id on the wire: ${JSON.stringify(sessions)}`);
  // Requests carry MCP-Protocol-Version and Mcp-Method; the client's only notification
  // (notifications/cancelled on listen close) carries no Mcp-Method (TS SDK 2.4.0).
  const wrong = mine.filter(
    (x) =>
      x.protocol_version !== MODERN ||
      x.mcp_method !== x.rpc ||
      x.status === undefined ||
      x.status >= 400,
  );
  expect(wrong.length === 0, `without the 2026 headers or failed: ${JSON.stringify(wrong)}`);
  const cancels = wire.filter((x) => x.rpc === "notifications/cancelled");
  const refused = cancels.filter((x) => x.status !== 202);
  expect(refused.length === 0, `notifications/cancelled POST answered ${JSON.stringify(refused)}`);
  const methods = [...new Set(wire.map((x) => x.rpc))].sort();
  expect(!methods.includes("initialize"), "the modern client sent initialize");
  return { count: wire.length, methods };
});

try {
  await client?.close();
} catch (error) {
  console.error(error);
}
print({ done: true });
process.exit(0);
