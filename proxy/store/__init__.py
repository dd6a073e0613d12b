"""Stores: what outlives a connection (:mod:`proxy.store.base` has the contract)."""

from __future__ import annotations

from proxy.store.base import (
    Batch,
    Entry,
    SessionRecord,
    Store,
    StoreError,
    StoreLimits,
    StreamRecord,
)

__all__ = [
    "Batch",
    "Entry",
    "SessionRecord",
    "Store",
    "StoreError",
    "StoreLimits",
    "StreamRecord",
]
