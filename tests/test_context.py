"""proxy/context.py: what the whole process shares, built once and handed down."""

from __future__ import annotations

from proxy.config import Config, config_from_mapping
from proxy.context import ProxyContext
from proxy.registry import Registry, session_limits


def _two_servers() -> Config:
    return config_from_mapping(
        {"servers": {"a": {"command": ["true"]}, "b": {"command": ["true"]}}}
    )


async def test_a_context_opens_and_closes_its_store_and_runs_its_closers() -> None:
    context = ProxyContext(Config())
    assert context.accepting and context.only_server is context.servers["default"]
    closed: list[str] = []

    async def close() -> None:
        closed.append("modern")

    context.on_shutdown(close)
    registry = Registry(context)
    await context.open(registry.serve_forwarded)
    assert context.persister is None and context.replicas is None  # memory: neither
    assert context.store_health() == {
        "kind": "memory",
        "epoch": context.store.epoch,
        "last_error": None,
        "history_lost_at": None,
    }
    await registry.shutdown()
    assert not context.accepting  # shutdown stops admission for every endpoint
    await context.close()
    assert closed == ["modern"]


def test_several_servers_have_no_only_server_and_their_own_limits() -> None:
    context = ProxyContext(_two_servers())
    assert context.only_server is None and sorted(context.servers) == ["a", "b"]
    limits = session_limits(context.config, context.servers)
    assert [limits.servers[n].key for n in ("a", "b")] == ["servers.a", "servers.b"]
    assert session_limits(Config(), ProxyContext(Config()).servers).servers["default"].key == (
        "upstream"  # one server without a servers: section is named by its upstream key
    )
    registry = Registry(context)
    assert len(registry) == 0 and list(registry.sessions()) == []
