// What the TypeScript SDK clients here share: the SDK, imported by absolute path from
// MCP_TOOLS_NODE_MODULES (.tools/node_modules; ESM ignores NODE_PATH), and their output,
// one JSON object per line on stdout.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.MCP_TOOLS_NODE_MODULES;
if (!modules) {
  console.error("MCP_TOOLS_NODE_MODULES is not set (run scripts/install-node-tools.sh)");
  process.exit(2);
}

// A module of the SDK's ESM build, by its path under dist/esm.
export const sdk = (path) =>
  import(pathToFileURL(join(modules, "@modelcontextprotocol/sdk/dist/esm", path)).href);

export const print = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

// The text of a tool result: its text blocks, concatenated.
export const text = (result) => result.content.map((block) => block.text ?? "").join("");
