"""A fast POST's response left to aiohttp (:mod:`proxy.downstream.fast_post`): what was
done before it, waiting by connection until aiohttp's handler of the same request takes
it (:func:`take_handoff`). A module of its own so that the handler's module need not
import the fast path's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web


class Handoff:
    """What a fast POST did before its response turned out not to be whole: aiohttp's
    handler of the same request finishes it (:meth:`finish`), or, should the request
    never reach it, :meth:`abandon` lets the session forget the connection."""

    __slots__ = ("_abandon", "finish", "method", "started")

    def __init__(
        self,
        finish: Callable[[web.Request], Awaitable[web.StreamResponse]],
        abandon: Callable[[], None],
        method: str,
        started: float,
    ) -> None:
        self.finish = finish
        self._abandon = abandon
        self.method = method
        self.started = started

    def abandon(self) -> None:
        self._abandon()


# The app's handoffs by transport (FastPosts.handoffs), until aiohttp takes each.
HANDOFFS_KEY: web.AppKey[dict[object, Handoff]] = web.AppKey("mcp_resume_proxy.handoffs")


def take_handoff(request: web.Request) -> Handoff | None:
    """The handoff waiting for ``request`` (aiohttp's side), if any."""
    handoffs = request.app.get(HANDOFFS_KEY)
    return handoffs.pop(request.transport, None) if handoffs else None
