"""The subcommands around the proxy that a wheel install needs: ``demo`` (the proxy in front
of the bundled demo server), ``example [NAME]`` (print a config shipped in the package) and
``health`` (ask a running proxy's ``/healthz``: the image's ``HEALTHCHECK``).

Everything they name is inside the package (issue 20: a ``uvx``/``pipx`` install has no
``config/`` or ``docs/``): the examples are package data under ``proxy/examples``, read
with :mod:`importlib.resources`; the demo server is :mod:`proxy.demo`, started with the
interpreter that runs the proxy, so it is found wherever the proxy is installed.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from importlib import resources

from proxy.config import Config, ConfigError
from proxy.config_env import settings_from_file_and_env
from proxy.config_sections import ListenConfig
from proxy.core.httprules import host_name

EXAMPLES: dict[str, tuple[str, str]] = {
    "local": (
        "local-stdio.yaml",
        "a local wrapper around a stdio server: every key, with its default",
    ),
    "sidecar": ("sidecar.yaml", "a sidecar container next to a stdio server (all interfaces)"),
    "retrofit": ("retrofit.yaml", "in front of a remote server you cannot change"),
    "replicas": ("replicas.yaml", "replicas on one Redis, behind any load balancer"),
    "servers": ("servers.json", "several servers from an mcpServers file, /servers/NAME/mcp"),
}
"""``example NAME`` → (file under ``proxy/examples``, what it is for)."""


def example_text(name: str) -> str:
    """The example config ``name`` (a key of :data:`EXAMPLES`), as shipped."""
    file = EXAMPLES[name][0]
    return (resources.files("proxy") / "examples" / file).read_text(encoding="utf-8")


def _listing() -> str:
    return "\n".join(f"  {name:<9} {what}" for name, (_, what) in EXAMPLES.items())


def example_main(argv: Sequence[str]) -> int:
    """``mcp-resume-proxy example [NAME]``: print one example config (no NAME: list them)."""
    parser = argparse.ArgumentParser(
        prog="mcp-resume-proxy example",
        description="Print an example config shipped with the proxy; edit it, then run "
        "mcp-resume-proxy --config FILE (mcp-resume-proxy check FILE validates it).",
        epilog=f"examples:\n{_listing()}\n\n  mcp-resume-proxy example local > proxy.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", nargs="?", choices=tuple(EXAMPLES), metavar="NAME")
    args = parser.parse_args(argv)
    if args.name is None:
        print(_listing())
        return 0
    sys.stdout.write(example_text(args.name))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``mcp-resume-proxy`` console script (and ``python -m proxy``): ``example`` and
    ``health`` here, without loading the server's libraries, ``login`` in
    :mod:`proxy.cli_login`; ``demo`` and everything else in :func:`proxy.cli.main`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["example"]:
        return example_main(argv[1:])
    if argv[:1] == ["health"]:
        return health_main(argv[1:])
    if argv[:1] == ["login"]:
        from proxy.cli_login import login_main

        return login_main(argv[1:])
    if argv[:1] == ["demo"]:
        try:
            argv = demo_argv(argv[1:])
        except ConfigError as exc:
            print(f"mcp-resume-proxy: {exc}", file=sys.stderr)
            return 2
    from proxy.cli import main as proxy_main  # the server's libraries: only to serve

    return proxy_main(argv)


def demo_argv(argv: Sequence[str]) -> list[str]:
    """``demo [OPTIONS]``: the proxy's own options, in front of the bundled demo server
    (:mod:`proxy.demo`) run by this very interpreter, so that it is found in any install
    (a ``uv tool`` or ``pipx`` environment's ``python`` is not the one on ``PATH``)."""
    if "--" in argv:
        raise ConfigError("demo: serves the bundled demo server; give no command after '--'")
    return [*argv, "--", sys.executable, "-m", "proxy.demo"]


HEALTH_EXIT_UNHEALTHY = 1
"""``health`` exits 0 or 1 only: Docker reserves a ``HEALTHCHECK``'s exit status 2."""


def probe_target(listen: ListenConfig) -> tuple[str, str]:
    """The ``/healthz`` URL of a proxy that listens as ``listen`` says, asked from its own
    machine, and the ``Host`` header to send: the address asked when ``allowed_hosts``
    serves it, else the first name it serves (the check is against DNS rebinding, which a
    local probe is not). A wildcard bind is asked on its loopback address."""
    if listen.port == 0:
        raise ConfigError(
            "listen.port: 0 binds any free port, so health cannot know it; set the port"
        )
    address = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(listen.host, listen.host)
    allowed = listen.allowed_hosts
    name = address
    if allowed and "*" not in allowed and address not in {host_name(a) for a in allowed}:
        name = host_name(allowed[0])

    def authority(host: str) -> str:
        shown = f"[{host}]" if ":" in host else host
        return f"{shown}:{listen.port}"

    return f"http://{authority(address)}/healthz", authority(name)


def check_health(config: Config, timeout: float) -> tuple[bool, str]:
    """Ask ``/healthz``: (healthy, a one-line reason). No HTTP proxy from the environment
    is used: the probe is for this machine's proxy."""
    url, host = probe_target(config.listen)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with opener.open(request, timeout=timeout) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, socket.timeout | TimeoutError):
            return False, f"{url}: no answer within {timeout:g} s"
        if isinstance(reason, http.client.HTTPException):
            return False, f"{url}: not an HTTP answer ({type(reason).__name__})"
        said = str(getattr(reason, "strerror", None) or reason)
        return False, f"{url}: {' '.join(said.split())}"  # one line
    return status == 200, f"{url}: {status} {_summary(status, body)}"


def _summary(status: int, body: bytes) -> str:
    if status == 421:
        return "(Host refused: add 127.0.0.1 to listen.allowed_hosts)"
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return "(not the proxy's /healthz answer)"
    if "status" not in answer:
        error = answer.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        return f"({message or 'not the proxy'})"
    sessions = answer.get("sessions")
    return f"{answer['status']}, {sessions} sessions" if sessions is not None else answer["status"]


def health_main(argv: Sequence[str]) -> int:
    """``mcp-resume-proxy health [--config FILE]``: exit 0 when the proxy the config (and
    the environment, as for the proxy) describes answers ``/healthz`` with 200, else 1;
    prints one line saying why."""
    parser = argparse.ArgumentParser(
        prog="mcp-resume-proxy health",
        description="Ask a running proxy's GET /healthz on the port its config sets (the "
        "file from --config or MCP_RESUME_PROXY_CONFIG, then MCP_RESUME_PROXY_HOST and "
        "_PORT, as the proxy reads them). Exit 0: it serves (200); exit 1: it does not, "
        "or the config is wrong. One line on stdout says why. For a container's "
        "HEALTHCHECK.",
    )
    parser.add_argument("--config", metavar="FILE", help="the proxy's config file")
    parser.add_argument("--timeout", type=float, default=3.0, metavar="SECONDS", help="default 3")
    args = parser.parse_args(argv)
    try:
        config = settings_from_file_and_env(args.config)
        healthy, reason = check_health(config, args.timeout)
    except ConfigError as exc:
        print(f"unhealthy: config error: {exc}")
        return HEALTH_EXIT_UNHEALTHY
    print(f"{'ok' if healthy else 'unhealthy'}: {reason}")
    return 0 if healthy else HEALTH_EXIT_UNHEALTHY
