#!/usr/bin/env bash
# Install the official TypeScript SDK 2.x client, @modelcontextprotocol/client (exact
# version), into .tools/ts-client2/ (git-ignored), using npm only. Its own folder with its own
# package.json, so it does not clash with the 1.x @modelcontextprotocol/sdk (and its zod) that
# scripts/install-node-tools.sh puts in .tools/node_modules. The e2e test
# tests/e2e/test_modern_sdk.py runs tests/e2e/ts/modern_client.mjs with it on the Node 22
# from .tools (install-node-tools.sh); the script imports the package by absolute path from
# MCP_TS_CLIENT2_MODULES (.tools/ts-client2/node_modules).
#
# Idempotent (scripts/npm-into-tools.sh). Overrides (environment): TS_CLIENT2_VERSION, NPM.
set -euo pipefail
exec "$(dirname "$0")/npm-into-tools.sh" ts-client2 @modelcontextprotocol/client \
    "${TS_CLIENT2_VERSION:-2.4.0}" dist/index.mjs
