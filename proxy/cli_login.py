"""``mcp-resume-proxy login [NAME] [--config FILE]``: sign in once to an upstream that
requires OAuth (``oauth.grant: authorization_code``); the proxy then refreshes the tokens
by itself (docs/upstreams.md §OAuth). The flow: :mod:`proxy.upstream.oauth_login`.

It prints the URL to open on stderr and waits for the browser's redirect on a loopback
port. Exit 0: signed in, tokens saved; 1: the sign-in failed (one line says why); 2: the
config is wrong. No token is ever printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import webbrowser
from collections.abc import Sequence

from proxy.config import ConfigError
from proxy.config_env import settings_from_file_and_env
from proxy.core.errors import ProxyError


def login_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="mcp-resume-proxy login",
        description="Sign in to an upstream MCP server that requires OAuth (its oauth.grant: "
        "authorization_code) and save the tokens for the proxy, which refreshes them itself.",
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="the server (omit if one)")
    parser.add_argument("--config", metavar="FILE", help="the proxy's config file")
    parser.add_argument(
        "--timeout", type=float, default=300.0, metavar="SECONDS", help="default 300"
    )
    parser.add_argument("--open", action="store_true", help="open the URL in a browser")
    args = parser.parse_args(argv)
    try:
        config = settings_from_file_and_env(args.config)
        servers = config.upstreams()
        name = args.name
        if name is None:
            if len(servers) != 1:
                raise ConfigError(f"name the server: one of {', '.join(servers)}")
            name = next(iter(servers))
        if name not in servers:
            raise ConfigError(f"no server {name!r}: one of {', '.join(servers)}")
    except ConfigError as exc:
        print(f"mcp-resume-proxy login: config error: {exc}", file=sys.stderr)
        return 2
    from proxy.upstream.oauth_login import login  # the server's libraries: only here

    def announce(url: str, redirect_uri: str) -> None:
        print(f"Open this URL in a browser to sign in to {name}:\n\n  {url}\n", file=sys.stderr)
        print(f"Waiting for the sign-in to come back to {redirect_uri}", file=sys.stderr)
        sys.stderr.flush()
        if args.open:
            webbrowser.open(url)

    try:
        path = asyncio.run(login(name, servers[name], announce, args.timeout))
    except ConfigError as exc:
        print(f"mcp-resume-proxy login: config error: {exc}", file=sys.stderr)
        return 2
    except ProxyError as exc:
        print(f"mcp-resume-proxy login: {exc.message}", file=sys.stderr)
        return 1
    print(f"Signed in to {name}: tokens saved in {path}", file=sys.stderr)
    return 0
