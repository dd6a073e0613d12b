#!/usr/bin/env bash
# Install redis-server (Redis >= 7; Debian 12 ships 7.0) for the Redis store's tests, from
# Debian's packages. The tests start their own server (tests/redis_server.py): this starts
# no service.
#
# Idempotent: when redis-server is already on PATH it prints where it is and does nothing.
# Runs as root (apt-get directly) or, when not root, through sudo if there is one.
set -euo pipefail
cd "$(dirname "$0")"

where() {
    echo "$(redis-server --version | cut -d' ' -f1-3) at $(command -v redis-server)"
}

if command -v redis-server >/dev/null 2>&1; then
    echo "install-redis: $(where)"
    exit 0
fi
./apt-install.sh install-redis redis-server
echo "install-redis: installed $(where)"
