#!/usr/bin/env bash
# Install the MCP Inspector (@modelcontextprotocol/inspector, exact version) into
# .tools/inspector/ (git-ignored), using npm only: the client people try servers with. Its
# CLI mode runs one request per process, never sends DELETE, and is one of the clients the
# tests point at the proxy (tests/clients/). Run it with the Node 22 from .tools:
#   PATH=.tools/node_modules/.bin:$PATH .tools/inspector/node_modules/.bin/mcp-inspector \
#       --cli http://127.0.0.1:PORT/mcp --method tools/list
#
# Idempotent: when the pinned version is already installed it only prints where it is.
# Overrides (environment): INSPECTOR_VERSION, NPM (the npm command).
set -euo pipefail

INSPECTOR_VERSION="${INSPECTOR_VERSION:-2.12.0}"
NPM="${NPM:-npm}"

install_dir="$(cd "$(dirname "$0")/.." && pwd)/.tools/inspector"
modules="$install_dir/node_modules"
entry="$modules/.bin/mcp-inspector"

installed_version() {
    local manifest="$modules/@modelcontextprotocol/inspector/package.json"
    [[ -f "$manifest" ]] || return 0
    sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
}

if [[ "$(installed_version)" == "$INSPECTOR_VERSION" && -x "$entry" ]]; then
    echo "install-inspector: already installed"
else
    mkdir -p "$install_dir"
    if [[ ! -f "$install_dir/package.json" ]]; then
        printf '{\n  "name": "mcp-resume-proxy-inspector",\n  "private": true\n}\n' \
            >"$install_dir/package.json"
    fi
    "$NPM" install --prefix "$install_dir" --save-exact --no-audit --no-fund \
        --loglevel=error "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
fi

echo "install-inspector: @modelcontextprotocol/inspector $(installed_version) at $entry"
