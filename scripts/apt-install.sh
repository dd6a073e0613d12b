#!/usr/bin/env bash
# apt-install.sh TAG PACKAGE: install one Debian package for the test suite, quietly, as
# root or through sudo, starting no service (policy-rc.d 101 while it installs: a
# container may lack systemd, and the tests start their own servers). apt-get's output is
# shown only when it fails. Used by install-redis.sh, install-haproxy.sh and
# install-chromium.sh.
set -euo pipefail
tag=$1
package=$2

if [[ "$(id -u)" -eq 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "$tag: $package is missing and this is not root (and there is no sudo):" >&2
    echo "$tag: install the Debian package $package by hand" >&2
    exit 1
fi

echo "$tag: installing the Debian package $package (apt-get)"
# One `apt-get update` serves the installs that follow it (scripts/test runs three): a
# stamp younger than 30 minutes means this machine's lists were just refreshed.
stamp="${TMPDIR:-/tmp}/mcp-resume-proxy-apt-updated"
if [[ -z "$(find "$stamp" -mmin -30 2>/dev/null)" ]]; then
    "${as_root[@]}" apt-get update -qq
    touch "$stamp"
fi
policy=/usr/sbin/policy-rc.d
added_policy=0
if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod +x "$policy"
    added_policy=1
fi
status=0
apt_log="$(mktemp)"
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "$package" >"$apt_log" 2>&1 || status=$?
if [[ "$added_policy" -eq 1 ]]; then
    "${as_root[@]}" rm -f "$policy"
fi
if [[ "$status" -ne 0 ]]; then
    cat "$apt_log" >&2
    rm -f "$apt_log"
    echo "$tag: apt-get install $package failed (exit $status)" >&2
    exit "$status"
fi
rm -f "$apt_log"
