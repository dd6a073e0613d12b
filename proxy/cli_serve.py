"""Serving, once the command line's config is read and checked (:func:`proxy.cli.main`):
the root that builds the process's context, app and listener, runs until a signal, and
ends everything it started. Kept apart from :mod:`proxy.cli` so that ``check`` and a
refused config load none of the server's libraries."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from collections.abc import Callable, Sequence

import structlog
from aiohttp import web

from proxy import __version__, tracing
from proxy.config import Config
from proxy.context import ProxyContext
from proxy.core import jsoncodec
from proxy.downstream.app import build_app
from proxy.downstream.drain import Drain, calls_in_flight
from proxy.downstream.fast_post import fast_posts
from proxy.downstream.guard import ConnectionGuard
from proxy.downstream.keys import AUTH_KEY
from proxy.downstream.resource import bind
from proxy.downstream.server_log import SERVER_LOG
from proxy.logs import configure_logging
from proxy.registry import Registry
from proxy.reload import Reloader
from proxy.store.base import StoreError
from proxy.store.sqlite_lock import StoreInUse
from proxy.upstream.lineage import end_unclaimed
from proxy.upstream.subreaper import REAPER

log = structlog.get_logger("proxy.cli")


def run(config: Config, reread: Callable[[], Config], watch: Sequence[str]) -> int:
    """Serve ``config`` until a signal ends it; the process's exit status."""
    configure_logging(config.log.format, config.log.level)
    try:
        asyncio.run(serve(config, reread=reread, watch=watch))
    except StoreInUse as exc:  # before the store was read and the port bound
        print(f"mcp-resume-proxy: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        kind = config.store.kind
        print(f"mcp-resume-proxy: cannot open the {kind} store: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"mcp-resume-proxy: cannot listen: {exc}", file=sys.stderr)
        return 1
    return 0


def _watch_children_with_pidfds() -> None:
    """On Python 3.11, learn of child exits through pidfds, not one thread per child.

    3.11's default child watcher starts a thread for every server process (51 threads for
    50 sessions, ~15 KB per idle session); Linux pidfds cost a file descriptor. 3.12 and
    later do this by default.
    """
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # an old kernel, or a sandbox that forbids it: keep the default
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)


def bound_port(listener: asyncio.Server, configured: int) -> int:
    """The port really listened on: ``listen.port: 0`` lets the system choose one."""
    for sock in listener.sockets:
        address = sock.getsockname()
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return configured


async def listen_guarded(runner: web.AppRunner, config: Config) -> asyncio.Server:
    """Listen like ``web.TCPSite`` would, but each connection goes through a
    :class:`ConnectionGuard` (header timeout, connection cap) around aiohttp's protocol."""
    assert runner.server is not None, "runner.setup() first"
    guard = ConnectionGuard(runner.server, config.listen, fast_posts(runner.app))
    loop = asyncio.get_running_loop()
    return await loop.create_server(guard, config.listen.host, config.listen.port, backlog=128)


def settle_heap() -> None:
    """What the process built to start (modules, app, config: ~80k objects) is left out
    of the collector's full passes from now on (``gc.freeze``): a full pass over it took
    100-200 ms on a loaded box, ~30M instructions, and a long replay's entries brought
    one every few replays (bench/README.md, helper replay); it now walks only what came
    after (under 1 ms)."""
    gc.collect()
    gc.freeze()


async def serve(
    config: Config,
    ready: asyncio.Event | None = None,
    reread: Callable[[], Config] | None = None,
    watch: Sequence[str] = (),
) -> None:
    """Serve until SIGINT/SIGTERM (SIGTERM drains first: :mod:`proxy.downstream.drain`),
    then end every session and stop every process. With ``reread`` (the config read again
    as at start), SIGHUP reloads it (:mod:`proxy.reload`), and so do changes of the files
    in ``watch`` when ``listen.watch_config``."""
    _watch_children_with_pidfds()
    tracing.start(config.tracing)  # off unless configured (docs/tracing.md)
    # The root: what the whole process shares is built here, once, and handed down.
    context = ProxyContext(config)
    registry = Registry(context)
    await context.open(registry.serve_forwarded)
    app = build_app(context, registry)
    runner = web.AppRunner(
        app,
        access_log=None,
        logger=SERVER_LOG,  # a request aiohttp cannot parse: logged without its bytes
        shutdown_timeout=5.0,
        keepalive_timeout=config.listen.keepalive_timeout_seconds,
    )
    await runner.setup()
    listener = await listen_guarded(runner, config)
    settle_heap()
    drain = Drain(context, calls_in_flight(app))  # SIGTERM drains first (drain.py)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, drain.on_signal, sig)
    reloader = None
    if reread is not None:
        reloader = Reloader(app, reread, list(watch) if config.listen.watch_config else [])
        loop.add_signal_handler(signal.SIGHUP, reloader.on_signal)
    host = config.listen.host
    shown = f"[{host}]" if ":" in host else host
    port = bound_port(listener, config.listen.port)
    bind(app[AUTH_KEY].resource, config, port)  # canonical URIs need the bound port
    if reloader is not None:
        reloader.port = port
    base = f"http://{shown}:{port}"
    servers = context.servers
    only = context.only_server
    url = f"{base}{config.listen.path}" if only is not None else base
    log.info(
        "proxy_listening",
        url=url,
        port=port,
        upstream=only.upstream.describe() if only is not None else None,
        transport=only.upstream.kind if only is not None else None,
        servers={name: f"{base}{server.mcp_path}" for name, server in servers.items()},
        json="msgspec" if jsoncodec.fast() else "stdlib",  # MCP_RESUME_PROXY_SPEEDUPS
    )
    for name, server in servers.items():  # what each server's clients can resume
        log.info("server_eras", server=name, **server.eras())
    if config.log.format == "console":
        where = (
            url
            if only is not None
            else ", ".join(f"{name} at {base}{server.mcp_path}" for name, server in servers.items())
        )
        print(f"mcp-resume-proxy {__version__} serving {where}", file=sys.stderr, flush=True)
    if ready is not None:
        ready.set()
    REAPER.adopt()  # servers' orphans come to this process, to be ended (upstream/lineage)
    REAPER.start(loop)
    try:
        await drain.run()  # returns at the first signal, or once its drain ends
    finally:
        log.info("proxy_stopping", sessions=len(registry))
        listener.close()  # stop accepting
        if reloader is not None:
            loop.remove_signal_handler(signal.SIGHUP)
            await reloader.close()
        await registry.shutdown()  # end sessions, stop every child process
        await end_unclaimed(config.upstream.stop_grace_seconds)  # and what they orphaned
        REAPER.stop()
        await context.close()  # the modern sides, the replicas, the store
        await runner.cleanup()
        await asyncio.to_thread(tracing.stop)  # the last spans out
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        log.info("proxy_stopped")
