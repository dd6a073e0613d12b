"""How the modern façade's parts are wired, in-process (no proxy subprocess)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from proxy.core import jsonrpc
from proxy.modern.hub import Hub, Listener


def test_the_hub_leaves_the_pools_one_subscriber_alone() -> None:
    """The façade is the pool's one ``on_broadcast`` subscriber (it invalidates the tool
    index, then tells the hub). The hub used to assign itself there too, and whichever was
    built last silently won: building a hub must not replace it."""
    seen: list[Any] = []
    pool = SimpleNamespace(on_broadcast=seen.append, on_session=None)
    hub = Hub(pool)  # type: ignore[arg-type]
    assert pool.on_broadcast == seen.append
    assert pool.on_session == hub._session_started


def test_the_hub_delivers_a_change_once_to_who_asked() -> None:
    pool = SimpleNamespace(on_broadcast=None, on_session=None, live_sessions=lambda: [])
    hub = Hub(pool)  # type: ignore[arg-type]
    tools = Listener("sub-1", {"toolsListChanged"}, set())
    prompts = Listener("sub-2", {"promptsListChanged"}, set())
    hub.add(tools)
    hub.add(prompts)
    changed = jsonrpc.classify({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
    hub.publish(changed)
    hub.publish(changed)  # the same change from another pooled session: once
    assert tools.queue.qsize() == 1 and prompts.queue.qsize() == 0
    assert tools.queue.get_nowait() == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "sub-1"}},
    }
