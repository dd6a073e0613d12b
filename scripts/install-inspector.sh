#!/usr/bin/env bash
# Install the MCP Inspector (@modelcontextprotocol/inspector, exact version) into
# .tools/inspector/ (git-ignored), using npm only: the client people try servers with. Its
# CLI mode runs one request per process, never sends DELETE, and is one of the clients the
# tests point at the proxy (tests/clients/). Run it with the Node 22 from .tools:
#   PATH=.tools/node_modules/.bin:$PATH .tools/inspector/node_modules/.bin/mcp-inspector \
#       --cli http://127.0.0.1:PORT/mcp --method tools/list
#
# Idempotent (scripts/npm-into-tools.sh). Overrides (environment): INSPECTOR_VERSION, NPM.
set -euo pipefail
exec "$(dirname "$0")/npm-into-tools.sh" inspector @modelcontextprotocol/inspector \
    "${INSPECTOR_VERSION:-2.12.0}" clients/launcher/build/index.js
