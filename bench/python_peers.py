"""The Python peers that need a venv of their own: FastMCP's proxy and IBM ContextForge.

Each goes into ``bench/.peers/<name>/`` (git-ignored), installed by :func:`install` from
PyPI at the version pinned in ``contenders.py`` (a stamp file holds what was installed; a
new pin reinstalls). Neither is needed by the tests: only ``run.py --peers``, or naming one
of them in ``--contenders``, installs them.

- ``fastmcp-proxy`` / ``fastmcp-proxy-es``: ``bench/fastmcp_proxy.py`` (FastMCP's
  ``create_proxy`` of the stdio server, served by uvicorn) run by that venv's Python,
  without and with FastMCP's in-memory ``EventStore``. Its own venv: it pins its own ``mcp``.
- ``contextforge``: ``python -m mcpgateway.translate --stdio CMD --expose-streamable-http``,
  the ContextForge command its docs give for putting a stdio server behind Streamable HTTP
  (the gateway itself federates HTTP servers; a stdio one reaches it through this bridge).
  It needs Python >= 3.12: the first that runs of ``$BENCH_CONTEXTFORGE_PYTHON``, ``python3.12`` /
  ``python3.13`` on the PATH, pyenv's 3.12+ builds. Its settings module refuses to load
  without strong secrets, so each start gets fresh random ones in its environment (never
  printed); the bridge itself checks no auth (no ``--oauth2Bearer``); its database setting
  points into its venv (the bridge opened none in the bench's runs).
"""

from __future__ import annotations

import glob
import os
import secrets
import shlex
import shutil
import subprocess
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PEERS = BENCH / ".peers"
LAUNCHER = BENCH / "fastmcp_proxy.py"
FASTMCP_VENV = PEERS / "fastmcp"
CONTEXTFORGE_VENV = PEERS / "contextforge"
KINDS = ("fastmcp-proxy", "fastmcp-proxy-es", "contextforge")
EVENT_STORE_KINDS = ("fastmcp-proxy-es",)  # the ones that keep events for a resume
# FastMCP's EventStore rewrites a stream's whole list of event ids on every event, so a
# stream of N events costs N² (measured, loaded 2-core box: 10,000 events in ~40 s, 5
# streams of 10,000 in ~41 s); the buffered memory phase's 5 x 50,000 would take over an
# hour, so it buffers this much (MB) instead, the size of run.py --quick's phase.
BUFFER_MB = {"fastmcp-proxy-es": 10.0}
SLOW_STORE = (
    "FastMCP's EventStore rewrites a stream's whole id list on every event (quadratic: "
    "10,000 events take ~40 s here), 5 x 50,000 would take over an hour"
)


def argv(kind: str, port: int, server: list[str], host: str) -> list[str]:
    """The command line of a peer of ``kind`` in front of the stdio ``server``."""
    if kind in ("fastmcp-proxy", "fastmcp-proxy-es"):
        store = ["--event-store"] if kind == "fastmcp-proxy-es" else []
        python = str(FASTMCP_VENV / "bin" / "python")
        return [python, str(LAUNCHER), "--port", str(port), "--host", host, *store, "--", *server]
    if kind == "contextforge":
        return [
            str(CONTEXTFORGE_VENV / "bin" / "python"),
            "-m",
            "mcpgateway.translate",
            "--stdio",
            shlex.join(server),
            "--expose-streamable-http",
            "--host",
            host,
            "--port",
            str(port),
            "--logLevel",
            "warning",
        ]
    raise ValueError(kind)


def env(kind: str) -> dict[str, str]:
    """What a start of ``kind`` adds to the environment: ContextForge's secrets."""
    if kind != "contextforge":
        return {}

    def strong() -> str:  # passes its length, entropy and complexity checks
        return secrets.token_urlsafe(32) + "Aa1!"

    return {
        "JWT_SECRET_KEY": strong(),
        "AUTH_ENCRYPTION_SECRET": strong(),
        "PLATFORM_ADMIN_PASSWORD": strong(),
        "DEFAULT_USER_PASSWORD": strong(),
        "DATABASE_URL": f"sqlite:///{CONTEXTFORGE_VENV / 'bench.db'}",  # inside .peers
    }


def python_312() -> str | None:
    """A Python >= 3.12 for ContextForge that runs (a pyenv shim may not), or None."""
    chosen = os.environ.get("BENCH_CONTEXTFORGE_PYTHON")
    if chosen:
        return chosen
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    builds = sorted(glob.glob(str(pyenv / "3.1[2-9]*" / "bin" / "python")))
    found = [shutil.which(name) for name in ("python3.12", "python3.13")]
    for python in [*[f for f in found if f], *builds]:
        check = [python, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"]
        if subprocess.run(check, capture_output=True).returncode == 0:
            return python
    return None


def _venv(venv: Path, python: str, requirement: str) -> str | None:
    """``requirement`` in ``venv`` (made with ``python``); None, or what went wrong."""
    stamp = venv / ".installed"
    if stamp.exists() and stamp.read_text(encoding="utf-8") == requirement:
        return None
    steps = [
        [python, "-m", "venv", str(venv)],
        [str(venv / "bin" / "pip"), "install", "-q", requirement],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            lines = [ln for ln in done.stderr.splitlines() if "is ignored" not in ln]
            return f"{requirement}: {' '.join(lines)[-300:]}"
    stamp.write_text(requirement, encoding="utf-8")
    return None


def install(python: str, fastmcp: str, contextforge: str) -> list[str]:
    """Both venvs (idempotent); what could not be installed, and why."""
    PEERS.mkdir(exist_ok=True)
    missing: list[str] = []
    problem = _venv(FASTMCP_VENV, python, f"fastmcp=={fastmcp}")
    if problem:
        missing.append(f"PyPI {problem}")
    newer = python_312()
    if newer is None:
        missing.append(
            f"PyPI mcp-contextforge-gateway=={contextforge}: needs Python >= 3.12, none found "
            "(python3.13, python3.12, ~/.pyenv/versions/3.12+; or set BENCH_CONTEXTFORGE_PYTHON)"
        )
    else:
        problem = _venv(CONTEXTFORGE_VENV, newer, f"mcp-contextforge-gateway=={contextforge}")
        if problem:
            missing.append(f"PyPI {problem} (Python {newer})")
    return missing
