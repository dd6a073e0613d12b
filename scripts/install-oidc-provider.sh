#!/usr/bin/env bash
# Install npm `oidc-provider` (exact version) into .tools/oidc/ (git-ignored), using npm
# only: a certified OAuth 2.1 / OpenID authorization server the tests start as a real
# authorization server (tests/oauth_as.py runs tests/oauth_as/provider.mjs on the Node 22
# of .tools with OIDC_PROVIDER_ENTRY pointing at the installed package).
#
# Idempotent (scripts/npm-into-tools.sh). Overrides (environment): OIDC_PROVIDER_VERSION, NPM.
set -euo pipefail
exec "$(dirname "$0")/npm-into-tools.sh" oidc oidc-provider \
    "${OIDC_PROVIDER_VERSION:-9.13.3}" lib/index.js
