#!/usr/bin/env bash
# Install the official TypeScript SDK 2.x client, @modelcontextprotocol/client (exact
# version), into .tools/ts-client2/ (git-ignored), using npm only. Its own folder with its own
# package.json, so it does not clash with the 1.x @modelcontextprotocol/sdk (and its zod) that
# scripts/install-node-tools.sh puts in .tools/node_modules. The e2e test
# tests/e2e/test_modern_sdk.py runs tests/e2e/ts/modern_client.mjs with it on the Node 22
# from .tools (install-node-tools.sh); the script imports the package by absolute path from
# MCP_TS_CLIENT2_MODULES (.tools/ts-client2/node_modules).
#
# Idempotent: when the pinned version is already installed it only prints where it is.
# Overrides (environment): TS_CLIENT2_VERSION, NPM (the npm command).
set -euo pipefail

TS_CLIENT2_VERSION="${TS_CLIENT2_VERSION:-2.4.0}"
NPM="${NPM:-npm}"

install_dir="$(cd "$(dirname "$0")/.." && pwd)/.tools/ts-client2"
modules="$install_dir/node_modules"
package="$modules/@modelcontextprotocol/client"
entry="$package/dist/index.mjs"

# Print the "version" field of an installed package's package.json, or nothing.
installed_version() {
    local manifest="$modules/$1/package.json"
    [[ -f "$manifest" ]] || return 0
    sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
}

if [[ "$(installed_version @modelcontextprotocol/client)" == "$TS_CLIENT2_VERSION" && -f "$entry" ]]; then
    echo "install-ts-client2: already installed"
else
    mkdir -p "$install_dir"
    if [[ ! -f "$install_dir/package.json" ]]; then
        printf '{\n  "name": "mcp-resume-proxy-ts-client2",\n  "private": true\n}\n' \
            >"$install_dir/package.json"
    fi
    "$NPM" install --prefix "$install_dir" --save-exact --no-audit --no-fund \
        --loglevel=error "@modelcontextprotocol/client@$TS_CLIENT2_VERSION"
fi

echo "install-ts-client2: @modelcontextprotocol/client $(installed_version @modelcontextprotocol/client) at $package"
