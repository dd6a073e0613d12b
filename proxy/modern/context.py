"""What the modern façade's parts share: one declared context, handed to each part.

:class:`~proxy.modern.endpoint.ModernFacade` builds it; ``subscriptions/listen``
(:mod:`proxy.modern.listen`) and the 2025-11-25 Tasks shape
(:mod:`proxy.modern.legacy_tasks`) take it, so neither needs the façade itself (mitmproxy's
``Context``: a small declared object in place of the top object passed down whole).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.config import Config
from proxy.modern.call import CallRun
from proxy.modern.hub import Hub
from proxy.modern.pool import UpstreamPool
from proxy.modern.tasks import TaskKeeper


@dataclass(frozen=True, slots=True)
class ModernContext:
    config: Config
    pool: UpstreamPool
    tasks: TaskKeeper
    hub: Hub
    track: Callable[[CallRun], None]  # count a call among the live ones (503 past the limit)
    tasks_enabled: bool
