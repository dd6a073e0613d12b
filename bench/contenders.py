"""What the benchmark runs: each contender's command, its start and stop, and the peers.

A contender is one HTTP endpoint at ``http://127.0.0.1:PORT/mcp``: the SDK server itself
(``direct``), this proxy in front of a stdio fixture, or a peer proxy (installed by
:func:`install_peers` into ``bench/.peers/``, git-ignored) in front of the same fixture.
Every process started here is stopped with SIGTERM to its own process group, then SIGKILL.

This proxy also runs with a persistent store (``proxy+sqlite``, ``proxy+redis`` in front of
the raw emitter, ``proxy+sqlite-sdk``, ``proxy+redis-sdk`` in front of the SDK server;
``proxy+redis`` talks to the bench's Redis over its Unix socket, ``proxy+redis-tcp`` over
127.0.0.1):
each start gets a fresh store (:func:`stores.prepared`) through a generated config file,
and the token secret through the environment.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import python_peers
import stores

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PEERS = BENCH / ".peers"
LEGACY = ROOT / "tests" / "fixtures" / "legacy_server.py"
SERVE_HTTP = ROOT / "tests" / "fixtures" / "serve_http.py"
FLOOD = ROOT / "tests" / "fixtures" / "flood_server.py"
PYTHON = sys.executable
PROXY = str(ROOT / ".venv" / "bin" / "mcp-resume-proxy")
# A copy of proxy/ to run instead of the working tree (``run.py --proxy-at COMMIT`` sets it:
# commits may land in the tree while a long run goes on).
PROXY_SRC_ENV = "BENCH_PROXY_SRC"


# ``run.py --baseline COMMIT``: a copy of proxy/ as of COMMIT, run by a twin of every one of
# this proxy's contenders (``proxy@COMMIT+raw`` beside ``proxy+raw``), so that before and
# after are measured in one run, paired by repetition.
BASELINE: dict[str, str] = {}  # {"commit": short commit, "src": the copy's directory}


def proxy_command(src: str = "") -> list[str]:
    """``mcp-resume-proxy``, or the same entry point on a copy of ``proxy/``: ``src``, else
    the one in ``$BENCH_PROXY_SRC``."""
    src = src or os.environ.get(PROXY_SRC_ENV, "")
    if not src:
        return [PROXY]
    code = (
        f"import sys; sys.path.insert(0, {src!r}); sys.argv[0] = 'mcp-resume-proxy'; "
        "from proxy.cli import main; sys.exit(main())"
    )
    return [PYTHON, "-c", code]


HOST = "127.0.0.1"

# Peers, pinned (the table measured these versions). Override with the environment.
NPM_PEERS = {
    "mcp-proxy": os.environ.get("BENCH_NPM_MCP_PROXY", "6.7.19"),
    "supergateway": os.environ.get("BENCH_SUPERGATEWAY", "4.0.0"),
}
PYPI_MCP_PROXY = os.environ.get("BENCH_PYPI_MCP_PROXY", "0.13.0")
# Issue 23's peers, each in a venv of its own (python_peers.py): the newest releases on PyPI
# when they were added (2026-12-05).
FASTMCP = os.environ.get("BENCH_FASTMCP", "4.2.3")
CONTEXTFORGE = os.environ.get("BENCH_CONTEXTFORGE", "1.1.0")
NPM_BIN = PEERS / "npm" / "node_modules" / ".bin"
PY_PEER = PEERS / "pypi" / "bin" / "mcp-proxy"

# The modern contenders' config (issue 11), spelled out though it is the default: the
# shared pool of initialized upstream sessions, and tasks after 1 s (the load client
# declares no Tasks extension, so no call becomes one).
MODERN = """\
modern:
  enabled: true
  pool:
    isolation: shared
    size: 4
tasks:
  mode: after_ms
  after_ms: 1000
"""

SDK = [PYTHON, str(LEGACY)]  # the SDK-based fixture (tools echo, burst, ...)
RAW = [PYTHON, str(FLOOD)]  # the stdlib emitter (tools echo, flood)


@dataclass(frozen=True)
class Contender:
    """One endpoint to measure. ``argv(port)`` starts it; ``server`` is what it wraps."""

    name: str
    # "direct", "proxy", "proxy-http", "npm-mcp-proxy", "supergateway", "pypi-mcp-proxy", or
    # one of python_peers.KINDS
    kind: str
    server: list[str]
    burst_tool: str = "burst"
    replay: bool = True  # try the replay phase (a peer without ids gets n/a)
    health: bool = False  # /healthz with buffered_bytes (this proxy)
    peer: bool = False
    store: str = "memory"  # this proxy's store.kind (stores.KINDS)
    notes: tuple[str, ...] = field(default=())
    client: str = "legacy"  # the load client's era (load.py --era): legacy or modern
    config: str = ""  # YAML sections of this proxy's config file (before the run's own)
    src: str = ""  # this proxy's code: a copy of proxy/ (the --baseline twin), else the tree

    def argv(self, port: int, extra: list[str] | None = None) -> list[str]:
        extra = extra or []
        s = self.server
        if self.kind == "direct":
            return [*s, "--port", str(port)]
        if self.kind == "proxy":
            cmd = [*proxy_command(self.src), "--port", str(port), "--log-level", "warning"]
            cmd += extra
            return [*cmd, "--", *s]
        if self.kind == "proxy-http":
            cmd = [*proxy_command(self.src), "--port", str(port), "--log-level", "warning"]
            return [*cmd, *extra]
        if self.kind == "npm-mcp-proxy":
            # Event store on (its default) and large enough for the replay and memory phases.
            return [
                str(NPM_BIN / "mcp-proxy"),
                "--port",
                str(port),
                "--host",
                HOST,
                "--server",
                "stream",
                "--eventStoreMaxEvents",
                "1000000",
                *(["--modern"] if self.client == "modern" else []),  # its default, said
                "--",
                *s,
            ]
        if self.kind == "supergateway":
            return [
                str(NPM_BIN / "supergateway"),
                "--stdio",
                subprocess.list2cmdline(s),
                "--outputTransport",
                "streamableHttp",
                "--stateful",
                "--port",
                str(port),
                "--logLevel",
                "none",
            ]
        if self.kind == "pypi-mcp-proxy":
            return [str(PY_PEER), "--port", str(port), "--host", HOST, "--", *s]
        if self.kind in python_peers.KINDS:
            return python_peers.argv(self.kind, port, s, HOST)
        raise ValueError(self.kind)

    @property
    def event_store(self) -> bool:
        """It keeps a session's events for a resume (the buffered memory phase needs one)."""
        return self.kind in ("proxy", "npm-mcp-proxy", *python_peers.EVENT_STORE_KINDS)


def http_upstream_available() -> bool:
    """The proxy's Streamable HTTP upstream (proxy/upstream/http.py) exists in this tree."""
    return importlib.util.find_spec("proxy.upstream.http") is not None


def contenders(server: list[str], tool: str, *, peers: bool) -> dict[str, Contender]:
    """The load contenders, all wrapping ``server`` (or, for direct, serving the SDK fixture)."""
    label = "sdk" if server == SDK else "raw"
    found: dict[str, Contender] = {}
    if server == SDK:
        direct = [PYTHON, str(SERVE_HTTP), "--fixture", str(LEGACY)]
        found["direct"] = Contender("direct", "direct", direct, tool, replay=False)
    found[f"proxy+{label}"] = Contender(f"proxy+{label}", "proxy", server, tool, health=True)
    # Beside the memory store's contender; redis over its Unix socket (as beside a sidecar),
    # redis-tcp over 127.0.0.1 (stores.redis_setup).
    for store in ("sqlite", "redis", "redis-tcp"):
        name = f"proxy+{store}" if label == "raw" else f"proxy+{store}-{label}"
        found[name] = Contender(name, "proxy", server, tool, health=True, store=store)
    # Stateless 2026-07-28 clients over the same upstream (load.py --era modern).
    modern = "proxy+modern" if label == "raw" else f"proxy+modern-{label}"
    found[modern] = Contender(
        modern, "proxy", server, tool, replay=False, health=True, client="modern", config=MODERN
    )
    if BASELINE:  # the same contenders on the --baseline copy, beside each one
        for name, c in list(found.items()):
            if c.kind == "proxy":
                twin = name.replace("proxy", f"proxy@{BASELINE['commit']}", 1)
                found[twin] = replace(c, name=twin, src=BASELINE["src"])
    if peers:
        for kind, name in [
            ("npm-mcp-proxy", "mcp-proxy(npm)"),
            ("supergateway", "supergateway"),
            ("pypi-mcp-proxy", "mcp-proxy(pypi)"),
        ]:
            found[f"{name}+{label}"] = Contender(f"{name}+{label}", kind, server, tool, peer=True)
        # npm mcp-proxy 6.7 serves 2026-07-28 on /mcp beside the 2025-era revisions
        # (--modern, on by default), one upstream connection for every caller.
        theirs = "mcp-proxy(npm)+modern" + ("" if label == "raw" else f"-{label}")
        found[theirs] = Contender(
            theirs, "npm-mcp-proxy", server, tool, replay=False, peer=True, client="modern"
        )
        # Issue 23: FastMCP's proxy without and with its event store, ContextForge's bridge.
        for kind, name in [
            ("fastmcp-proxy", "fastmcp-proxy"),
            ("fastmcp-proxy-es", "fastmcp-proxy-es"),
            ("contextforge", "contextforge"),
        ]:
            found[f"{name}+{label}"] = Contender(f"{name}+{label}", kind, server, tool, peer=True)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"contender exited early with status {proc.returncode}")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not open after {timeout} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process's own group (start_new_session), then SIGKILL it after 15 s."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=15)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # children the contender left behind, if any
    proc.wait(timeout=5)


@contextlib.contextmanager
def running(
    argv: list[str], port: int, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``argv`` (with ``env`` added to the environment) listening on ``port``; stop it
    (and its group) on the way out."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, **env} if env else None,
        )
        try:
            wait_for_port(port, proc)
            yield proc
        except Exception:
            log.seek(0)
            tail = log.read()[-2000:].decode(errors="replace")
            print(f"{argv[0]} stderr (tail):\n{tail}", file=sys.stderr)
            raise
        finally:
            stop(proc)


@dataclass(frozen=True)
class Started:
    port: int
    pid: int  # the process to probe
    probe: str = ""  # its store, seen from outside (stores.footprint); "" for memory


@contextlib.contextmanager
def started(contender: Contender, sections: str = "", *, alone: bool = False) -> Iterator[Started]:
    """The contender on a free port, with ``sections`` (YAML, this proxy only) and its
    store in a generated config file. ``alone``: see :func:`stores.prepared`."""
    port = free_port()
    with stores.prepared(contender.store, alone=alone) as store:
        text = contender.config + sections + store.sections
        config = config_file(text) if text and contender.kind.startswith("proxy") else None
        extra = ["--config", str(config)] if config is not None else []
        try:
            env = {**store.env, **python_peers.env(contender.kind)}
            with running(contender.argv(port, extra), port, env) as proc:
                yield Started(port, proc.pid, store.probe)
        finally:
            if config is not None:
                config.unlink()


def config_file(sections: str) -> Path:
    """A YAML config in a temporary file (the caller deletes it)."""
    fd, name = tempfile.mkstemp(prefix="bench-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(sections)
    return Path(name)


def install_peers() -> list[str]:
    """Install the peers into bench/.peers (idempotent); return what could not be installed."""
    missing: list[str] = []
    PEERS.mkdir(exist_ok=True)
    npm_dir = PEERS / "npm"
    wanted = [f"{name}@{version}" for name, version in NPM_PEERS.items()]
    stamp = npm_dir / ".installed"
    have = (
        stamp.exists()
        and stamp.read_text(encoding="utf-8").split() == wanted
        and all((NPM_BIN / name).exists() for name in NPM_PEERS)
    )
    if not have:
        npm_dir.mkdir(exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(npm_dir), *wanted],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            stamp.write_text(" ".join(wanted), encoding="utf-8")
        else:
            missing.append(f"npm {' '.join(wanted)}: {done.stderr.strip()[-300:]}")
    if not PY_PEER.exists():
        venv = PEERS / "pypi"
        steps = [
            [PYTHON, "-m", "venv", str(venv)],
            [str(venv / "bin" / "pip"), "install", "-q", f"mcp-proxy=={PYPI_MCP_PROXY}"],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                missing.append(f"PyPI mcp-proxy: {done.stderr.strip()[-300:]}")
                break
    return missing + python_peers.install(PYTHON, FASTMCP, CONTEXTFORGE)
