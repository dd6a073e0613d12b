#!/usr/bin/env bash
# Install redis-server (Redis >= 7; Debian 12 ships 7.0) for the Redis store's tests, from
# Debian's packages. The tests start their own server (tests/redis_server.py): this starts
# no service.
#
# Idempotent: when redis-server is already on PATH it prints where it is and does nothing.
# Runs as root (apt-get directly) or, when not root, through sudo if there is one.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
    echo "install-redis: $(redis-server --version | cut -d' ' -f1-3) at $(command -v redis-server)"
    exit 0
fi

if [[ "$(id -u)" -eq 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
else
    echo "install-redis: redis-server is missing and this is not root (and there is no sudo):" >&2
    echo "install-redis: install the Debian package redis-server (Redis >= 7) by hand" >&2
    exit 1
fi

echo "install-redis: installing the Debian package redis-server (apt-get)"
"${as_root[@]}" apt-get update -qq
# policy-rc.d 101: the package's post-install must not start a service (a container may
# lack systemd, and the tests start their own server anyway).
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
    apt-get install -y -qq --no-install-recommends redis-server >"$apt_log" 2>&1 || status=$?
if [[ "$added_policy" -eq 1 ]]; then
    "${as_root[@]}" rm -f "$policy"
fi
if [[ "$status" -ne 0 ]]; then
    cat "$apt_log" >&2
    rm -f "$apt_log"
    echo "install-redis: apt-get install redis-server failed (exit $status)" >&2
    exit "$status"
fi
rm -f "$apt_log"
echo "install-redis: installed $(redis-server --version | cut -d' ' -f1-3) at $(command -v redis-server)"
