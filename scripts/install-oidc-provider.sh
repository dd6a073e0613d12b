#!/usr/bin/env bash
# Install npm `oidc-provider` (exact version) into .tools/oidc/ (git-ignored), using npm
# only: a certified OAuth 2.1 / OpenID authorization server the tests start as a real
# authorization server (tests/oauth_as.py runs tests/oauth_as/provider.mjs on the Node 22
# of .tools with OIDC_PROVIDER_ENTRY pointing at the installed package).
#
# Idempotent: when the pinned version is already installed it only prints where it is.
# Overrides (environment): OIDC_PROVIDER_VERSION, NPM (the npm command).
set -euo pipefail

OIDC_PROVIDER_VERSION="${OIDC_PROVIDER_VERSION:-9.13.3}"
NPM="${NPM:-npm}"

install_dir="$(cd "$(dirname "$0")/.." && pwd)/.tools/oidc"
manifest="$install_dir/node_modules/oidc-provider/package.json"
entry="$install_dir/node_modules/oidc-provider/lib/index.js"

installed_version() {
    [[ -f "$manifest" ]] || return 0
    sed -n 's/^[[:space:]]*"version":[[:space:]]*"\([^"]*\)".*/\1/p' "$manifest" | head -n 1
}

if [[ "$(installed_version)" == "$OIDC_PROVIDER_VERSION" && -f "$entry" ]]; then
    echo "install-oidc-provider: already installed"
else
    mkdir -p "$install_dir"
    if [[ ! -f "$install_dir/package.json" ]]; then
        printf '{\n  "name": "mcp-resume-proxy-oidc",\n  "private": true\n}\n' \
            >"$install_dir/package.json"
    fi
    "$NPM" install --prefix "$install_dir" --save-exact --no-audit --no-fund \
        --loglevel=error "oidc-provider@$OIDC_PROVIDER_VERSION"
fi
echo "install-oidc-provider: oidc-provider $OIDC_PROVIDER_VERSION at $entry"
