"""The command line: ``mcp-resume-proxy [options] -- CMD [ARGS...]``,
``mcp-resume-proxy [options] --upstream URL``, ``connect URL`` and ``check FILE...``
(``demo``, ``example`` and ``health``: :mod:`proxy.cli_tools`, the console script,
which hands the rest to :func:`main`)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import os
import signal
import sys
from collections.abc import Callable, Sequence

import structlog
from aiohttp import web

from proxy import __version__, tracing
from proxy.config import (
    Config,
    ConfigError,
    Problems,
    collect_file,
    config_from_mapping,
    interpolate,
    override,
)
from proxy.config_env import env as _env
from proxy.config_env import env_speedups, settings_from_file_and_env
from proxy.config_import import KEY as MCP_SERVERS
from proxy.config_strings import check_header
from proxy.config_system import check_signed_in, check_store_path, check_system
from proxy.context import ProxyContext, token_secret
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

DESCRIPTION = """\
Serve an MCP server (a stdio command, or a remote URL) over resumable Streamable HTTP.

Clients connect to http://HOST:PORT/mcp (or ws://HOST:PORT/ws). Each client session gets
its own server process (or its own upstream session on a URL). When a client's connection
drops, the server's work goes on and everything it says is kept; the client resumes with
GET + Last-Event-ID (the official SDKs do this by themselves) and receives every later
message exactly once, in order.
"""

EPILOG = """\
examples:
  mcp-resume-proxy demo            # the bundled demo server at http://127.0.0.1:8808/mcp
  mcp-resume-proxy -- python my_server.py
  mcp-resume-proxy --port 9000 -- npx -y @modelcontextprotocol/server-everything
  mcp-resume-proxy example local > proxy.yaml      # every key, with its default
  mcp-resume-proxy --config proxy.yaml
  mcp-resume-proxy --config servers.json   # an mcpServers file: /servers/NAME/mcp each
  mcp-resume-proxy --upstream https://example.com/mcp --header "Authorization: Bearer ${TOKEN}"

subcommands (each with --help):
  demo [OPTIONS]   the proxy in front of the bundled demo server (tools echo, countdown)
  example [NAME]   print an example config: local, sidecar, retrofit, replicas, servers
  check FILE...    validate config files, start nothing
  health           ask the running proxy's /healthz (its port from the config); exit 0 or 1
  connect URL      a stdio server for desktop hosts that relays to a running proxy

Settings come from defaults, then the config file, then the environment
(MCP_RESUME_PROXY_CONFIG, _HOST, _PORT, _UPSTREAM_URL, _LOG_FORMAT, _LOG_LEVEL,
_DRAIN_SECONDS, _SPEEDUPS), then the command line. --port 0 binds any free port; the log line
proxy_listening names it.

SIGTERM drains first: /readyz turns 503, new sessions and calls get 503 (data.reason
"proxy_draining", Retry-After), and calls in flight may finish for up to
listen.drain_seconds (30; 0: no drain); a second SIGTERM or a Ctrl-C ends the drain. Then,
as on Ctrl-C at once: the proxy stops accepting, answers every call still in flight with a
JSON-RPC error (code -32000, data.reason "proxy_shutdown") before its stream ends, stops
every server process, and exits 0. GET /healthz answers 200 while the proxy serves or
drains (the upstream's state is in the body) and 503 while it stops.

Every key of the config file, with its default and what it does: mcp-resume-proxy example
local.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-resume-proxy",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="YAML config file (mcp-resume-proxy example NAME prints one)",
    )
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8808)")
    parser.add_argument(
        "--log-format", choices=("console", "json"), help="log format (default console)"
    )
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), help="default info"
    )
    parser.add_argument(
        "--upstream",
        metavar="URL",
        help="a remote MCP server to front instead of a command (http(s):// or ws(s)://)",
    )
    parser.add_argument(
        "--transport",
        choices=("auto", "streamable-http", "sse", "websocket"),
        help="how to speak to --upstream (default auto: by scheme and path)",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="a header for every request to --upstream (repeatable; ${VAR} expands)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="-- CMD [ARGS...]",
        help="the stdio MCP server to run, one process per client session",
    )
    return parser


def resolve_config(args: argparse.Namespace) -> Config:
    """Defaults < config file < environment (MCP_RESUME_PROXY_*) < command line."""
    config = settings_from_file_and_env(args.config)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    config = override(config, "listen", host=args.host, port=args.port)
    config = override(config, "log", format=args.log_format, level=args.log_level)
    url = args.upstream or (_env("UPSTREAM_URL") if not command else None)
    if command and args.upstream:
        raise ConfigError("give either a command after '--' or --upstream URL, not both")
    if config.servers and (command or url or args.header or args.transport):
        raise ConfigError(
            "servers: the config file names its servers; a command after '--', --upstream "
            "(or MCP_RESUME_PROXY_UPSTREAM_URL), --header and --transport are for one "
            "server without a file"
        )
    if command:  # the command line wins over a config file's upstream
        upstream = dataclasses.replace(config.upstream, command=command, url=None)
        config = dataclasses.replace(config, upstream=upstream)
    elif url:
        upstream = dataclasses.replace(config.upstream, url=url, command=[])
        config = dataclasses.replace(config, upstream=upstream)
    headers = dict(config.upstream.headers)
    for header in args.header:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            # The value is not shown: it is most often a credential.
            raise ConfigError("--header: expected 'NAME: VALUE' (a name, a colon, a value)")
        headers[name.strip()] = value.strip()
    config = override(config, "upstream", transport=args.transport, headers=headers or None)
    config = config_from_mapping(_as_mapping(config))  # re-validate what flags changed
    if not config.servers and not config.upstream.configured:
        raise ConfigError(
            "upstream: no MCP server; give a command after '--', --upstream URL, "
            "or upstream.command / upstream.url (or servers) in the config file"
        )
    _resolve_headers(config)  # an unset ${VAR} is a config error now, not later
    return config


def reread(args: argparse.Namespace) -> Config:
    """The config as a start would read and check it now (a reload: :mod:`proxy.reload`)."""
    config = resolve_config(args)
    token_secret(config)
    check_store_path(config.store)
    return config


def _resolve_headers(config: Config) -> None:
    """What is resolved only when an upstream starts, resolved now: an unset ``${VAR}`` is
    a config error at start, not at the first session."""
    if not config.servers:
        config.upstream.resolved_headers()
        config.upstream.resolved_command()
    for name, server in config.servers.items():
        server.resolved_headers(f"servers.{name}")
        server.resolved_command(f"servers.{name}")


def _as_mapping(config: Config) -> dict[str, object]:
    return dataclasses.asdict(config)


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


def check(path: str) -> Problems:
    """Everything ``--config path`` would refuse at start, found without starting, every
    problem at once: the file (strict JSON for ``.json``), its keys, types and bounds, the
    rules between keys, the environment variables it names, an upstream, a token secret
    for a persistent store, a SQLite ``store.path`` this user cannot write; and what may
    fail later (:mod:`proxy.config_system`): an upstream program not found (an error for a
    path, a warning for a name not on ``PATH``)."""
    problems = Problems()
    config = collect_file(path, problems)
    if config is None:  # not readable, not YAML or JSON: nothing more to look at
        return problems
    # Not when a wrong command or url is the cause, nor in an mcpServers file (it has
    # said so already, naming its entries).
    said = problems.names("upstream.command", "upstream.url", MCP_SERVERS)
    if not (config.servers or config.upstream.configured or said):
        problems.error("upstream: no MCP server; set upstream.command or upstream.url")
    for name, server in config.upstreams().items():
        where = f"servers.{name}" if config.servers else "upstream"
        for header, value in server.headers.items():
            with problems.collecting():  # never shown: only its name
                check_header(
                    header, interpolate(value, f"{where}.headers.{header}"), f"{where}.headers"
                )
        with problems.collecting():
            server.resolved_command(where)  # never shown: only its key path
        if server.oauth.client_secret is not None:
            with problems.collecting():
                server.oauth.resolved_secret(where)  # never shown: only its variable's name
        if server.oauth.grant == "authorization_code":
            check_signed_in(name, server, where, problems)
    with problems.collecting():
        token_secret(config)
    check_system(config, problems)
    return problems


def check_main(argv: Sequence[str]) -> int:
    """``mcp-resume-proxy check [--strict] FILE...``: validate config files, start nothing.
    Prints ``FILE: ok`` (stdout), or each problem on a line of its own (stderr):
    ``FILE: KEY.PATH: what was expected``, and ``FILE: warning: KEY.PATH: ...`` for what
    may still work where the proxy runs. Exits 2 on any error (or warning, with
    ``--strict``)."""
    parser = argparse.ArgumentParser(
        prog="mcp-resume-proxy check",
        description="Validate config files without starting anything; name every problem.",
    )
    parser.add_argument(
        "--strict", action="store_true", help="warnings fail too (exit 2), e.g. in CI"
    )
    parser.add_argument("files", nargs="+", metavar="FILE")
    args = parser.parse_args(argv)
    status = 0
    for path in args.files:
        problems = check(path)
        for message in problems.errors:
            if not message.startswith(path):  # a file error names its file already
                message = f"{path}: {message}"
            print(message, file=sys.stderr)
        for message in problems.warnings:
            print(f"{path}: warning: {message}", file=sys.stderr)
        if problems.errors or (args.strict and problems.warnings):
            status = 2
        else:
            print(f"{path}: ok")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["connect"]:
        from proxy.shim import main as connect_main  # the stdio shim (DESIGN D5)

        return connect_main(argv[1:])
    if argv[:1] == ["check"]:
        return check_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = resolve_config(args)
        jsoncodec.use_fast(env_speedups())
        token_secret(config)  # a persistent store refuses to start without one
        check_store_path(config.store)  # a SQLite file this user can write
    except ConfigError as exc:
        for message in exc.messages:  # every problem, one a line
            print(f"mcp-resume-proxy: config error: {message}", file=sys.stderr)
        return 2
    configure_logging(config.log.format, config.log.level)
    watched = [args.config or _env("CONFIG") or "", config.auth.tokens_file or ""]
    try:
        asyncio.run(serve(config, reread=lambda: reread(args), watch=watched))
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
