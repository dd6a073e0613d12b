"""The command line: ``mcp-resume-proxy [options] -- CMD [ARGS...]``,
``mcp-resume-proxy [options] --upstream URL``, ``connect URL`` and ``check FILE...``
(``demo``, ``example`` and ``health``: :mod:`proxy.cli_tools`, the console script,
which hands the rest to :func:`main`)."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import sys
from collections.abc import Sequence

from proxy import __version__
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
from proxy.config_system import check_signed_in, check_store_path, check_system, token_secret
from proxy.core import jsoncodec

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
    # The server's libraries (aiohttp, the store, the upstreams) load only now: a config
    # refused above, and ``check``, pay for none of them. What they build lives as long
    # as the process (and is frozen out of the collector once serving: settle_heap), so
    # the collector's passes meanwhile only cost time: ~25 ms of a ~330 ms start.
    gc.disable()
    try:
        from proxy.cli_serve import run
    finally:
        gc.enable()

    watched = [args.config or _env("CONFIG") or "", config.auth.tokens_file or ""]
    return run(config, lambda: reread(args), watched)
