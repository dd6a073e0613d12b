#!/usr/bin/env bash
# Install haproxy from Debian's packages for the tests that put a real balancer in front
# of replicas (tests/balancer.py: round robin, no stickiness, health check on /readyz).
# The tests start their own haproxy on a free port: this starts no service.
#
# Idempotent: when haproxy is already on PATH (or at /usr/sbin/haproxy) it prints where
# it is and does nothing. Runs as root (apt-get directly) or, when not root, through sudo.
set -euo pipefail
cd "$(dirname "$0")"

find_haproxy() {
    command -v haproxy 2>/dev/null || { [ -x /usr/sbin/haproxy ] && echo /usr/sbin/haproxy; }
}

where() {
    local bin
    bin=$(find_haproxy)
    echo "$("$bin" -v | head -1 | cut -d' ' -f1-3) at $bin"
}

if find_haproxy >/dev/null; then
    echo "install-haproxy: $(where)"
    exit 0
fi
./apt-install.sh install-haproxy haproxy
echo "install-haproxy: installed $(where)"
