"""OpenTelemetry traces of what the proxy does for its clients (docs/tracing.md).

This module is the one seam the rest of the proxy calls: thin hooks that do nothing, and
import nothing of OpenTelemetry, while tracing is off (``tracing.enabled``, or the standard
``OTEL_*`` variables: :meth:`proxy.config_tracing.TracingConfig.on`). :func:`start` turns
them on by loading :mod:`proxy.tracing.sdk`, which holds every span and every attribute.

Each hook is cheap when off: one global read, then the caller's own value back (an
awaitable, a shared null context manager), so the hot paths pay nothing measurable
(``bench/`` measures it: docs/tracing.md).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from proxy.config_tracing import TracingConfig
    from proxy.core.jsonrpc import Message
    from proxy.tracing.sdk import Tracing

T = TypeVar("T")

_impl: Tracing | None = None
_NULL: contextlib.nullcontext[Any] = contextlib.nullcontext()
_NO_CARRIER: contextlib.nullcontext[dict[str, str]] = contextlib.nullcontext({})


def start(config: TracingConfig, environ: Mapping[str, str] = os.environ) -> bool:
    """Turn tracing on if ``config`` (or the environment) asks for it; whether it did."""
    global _impl
    if _impl is not None or not config.on(environ):
        return _impl is not None
    from proxy.tracing.sdk import Tracing

    _impl = Tracing(config, environ)
    return True


def stop(timeout: float = 5.0) -> None:
    """Export what is left (for at most ``timeout`` seconds) and turn tracing off.
    Blocking: run it in a thread."""
    global _impl
    impl, _impl = _impl, None
    if impl is not None:
        impl.stop(timeout)


def on() -> bool:
    return _impl is not None


# ---------------------------------------------------------------------- client requests
def client_post(
    answer: Awaitable[T],
    headers: Mapping[str, str],
    messages: list[Message],
    server: str,
    principal: str | None,
) -> Awaitable[T]:
    """A POST's span around ``answer`` (what serves it), its parent the client's
    ``params._meta.traceparent`` or ``traceparent`` header; off: ``answer`` itself."""
    if _impl is None:
        return answer
    return _impl.client_post(answer, headers, messages, server, principal)


def client_resume(
    answer: Awaitable[T], headers: Mapping[str, str], server: str, principal: str | None
) -> Awaitable[T]:
    """A GET with ``Last-Event-ID``'s span around ``answer``; off: ``answer`` itself."""
    if _impl is None or "Last-Event-ID" not in headers:
        return answer
    return _impl.client_resume(answer, headers, server, principal)


def note(**attributes: Any) -> None:
    """Add to the current request's span (``session``, ``stream``, ``replayed``, ...)."""
    if _impl is not None:
        _impl.note(attributes)


def note_with(attributes: Callable[[], dict[str, Any]]) -> None:
    """:func:`note` with attributes computed only when tracing is on."""
    if _impl is not None:
        _impl.note(attributes())


# ---------------------------------------------------------------------- upstream
def wrap_upstream(context: Any, build: Callable[[Any], T]) -> T:
    """The upstream ``build(context)`` makes; on: with every request it is sent given a
    child span and the trace context in ``params._meta`` (every transport)."""
    if _impl is None:
        return build(context)
    return _impl.wrap_upstream(context, build)


def http_headers(msg: Message, headers: dict[str, str]) -> None:
    """An HTTP upstream's request headers: ``traceparent`` and ``tracestate`` as the
    message's ``params._meta`` carries them (W3C Trace Context over HTTP)."""
    if _impl is not None:
        _impl.http_headers(msg, headers)


# ---------------------------------------------------------------------- tasks, store, replicas
def task_life(run: Any, task_id: str, era: str) -> None:
    """A span from a call becoming a task until the call ends."""
    if _impl is not None:
        _impl.task_life(run, task_id, era)


def gather(links: list[Any]) -> None:
    """Note the current request's span among ``links`` (the store batch it will go in)."""
    if _impl is not None:
        _impl.gather(links)


def commit(links: list[Any], events: int, kind: str) -> contextlib.AbstractContextManager[Any]:
    """A store commit batch's span, a child of the first request it holds."""
    if _impl is None or not links:
        return _NULL
    return _impl.commit(links, events, kind)


def forward(owner: str, request: Any) -> contextlib.AbstractContextManager[dict[str, str]]:
    """A forward to replica ``owner``: its span, and the envelope keys that carry it."""
    if _impl is None:
        return _NO_CARRIER
    return _impl.forward(owner, request)


def forwarded(message: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """The holder's span for a forwarded request, in the asker's trace."""
    if _impl is None:
        return _NULL
    return _impl.forwarded(message)
