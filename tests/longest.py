"""The suite's longest test files, longest first, run before all others.

``scripts/test`` runs pytest-xdist with ``--dist loadfile --no-loadscope-reorder``: each
file goes whole to one worker, in the order collected. Without this list that order is
alphabetical, and xdist's own reorder (files with the most tests first) sends the files of
one or two long tests (a client matrix, a conformance run, the nemesis) last: a worker
starts one of them when the others are nearly done, and the run waits for it. With the
long files first, the short ones fill in at the end.

The figures behind the order: ``pytest -n 4 --dist loadfile --durations=0`` on the 2-core
box (seconds per file, setup and teardown included; here ≥ 20 s). A file missing from the
list only runs later; refresh it when the suite's shape changes.
"""

from __future__ import annotations

import pytest

LONGEST_FIRST: tuple[str, ...] = (
    "tests/test_config_hostile.py",
    "tests/nemesis/test_nemesis.py",  # two runs: Redis, then SQLite (~80 s)
    "tests/conformance/test_modern.py",
    "tests/test_balancer.py",
    "tests/clients/test_matrix_node.py",
    "tests/upstream/test_oauth_upstream.py",
    "tests/conformance/test_conformance.py",
    "tests/downstream/test_shim.py",
    "tests/upstream/test_ws_upstream.py",
    "tests/e2e/test_sdk_client.py",
    "tests/downstream/test_websocket.py",
    "tests/test_replicas_paths.py",
    "tests/downstream/test_fault_cuts.py",
    "tests/modern/test_facade.py",
    "tests/e2e/test_large_results.py",
    "tests/clients/test_matrix_python.py",
    "tests/test_replicas.py",
    "tests/modern/test_tasks.py",
    "tests/test_wheel.py",
    "tests/downstream/test_http.py",
    "tests/upstream/test_idle_stop.py",
    "tests/test_tracing_paths.py",
    "tests/test_principal_streams.py",
    "tests/test_restart.py",
    "tests/test_check.py",
    "tests/downstream/test_shim_proxy_down.py",
    "tests/e2e/test_inspector_idle.py",
    "tests/test_server_streams.py",
    "tests/test_drain.py",
    "tests/downstream/test_slow_client.py",
    "tests/test_auth_oauth_clients.py",
    "tests/test_store_chaos.py",
    "tests/e2e/test_server_everything.py",
    "tests/test_shutdown.py",
    "tests/test_auth_resource.py",
    "tests/upstream/test_respawn.py",
    "tests/test_servers.py",
    "tests/test_replicas_cluster_replica_failover.py",
    "tests/test_secrets_in_logs.py",
    "tests/test_reload.py",
    "tests/test_status_page.py",
    "tests/downstream/test_fast_post.py",
    "tests/clients/test_large_results.py",
    "tests/upstream/test_sse_upstream.py",
    "tests/core/test_session_machine.py",
    "tests/upstream/test_http_upstream.py",
    "tests/modern/test_mrtr.py",
    "tests/e2e/test_ts_client.py",
    "tests/e2e/test_tool_rules.py",
    "tests/modern/test_listen_pool.py",
    "tests/test_reload_replicas.py",
)


def longest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: the files of :data:`LONGEST_FIRST` first, in its
    order; every other file after them, as collected; each file's tests as collected."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    last = len(rank)
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], last))
