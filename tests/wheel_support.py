"""The wheel as a user gets it: built from a copy of the source tree (nothing written into
the repository, nothing stale from an earlier build), installed by the user's installers
into fresh directories, run with an environment that holds none of the repository
(no ``PYTHONPATH``, a working directory outside it), and called over MCP."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp

from tests.downstream.sse_client import RawSession, messages
from tests.support import ROOT, stop_proxy, tail, wait_listening

BIN = Path(sys.executable).parent
"""The test environment's scripts: ``uv``, ``uvx``, ``pipx``, ``twine`` (the test extra)."""

SOURCES = ("pyproject.toml", "README.md", "proxy", "config")
"""What a build reads: proxy/examples/* are symlinks into config/."""

BASE_PYTHON = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
"""The interpreter under this virtualenv: the one a user's installer would be given."""


def build_dist(out: Path, *, wheel_only: bool = False) -> list[Path]:
    """``python -m build`` of a copy of the sources: the sdist and the wheel (or the wheel
    alone), in ``out``. The build backend is the test environment's (``--no-isolation``:
    the test extra holds what ``build-system.requires`` asks, and ``build`` checks it), so
    building needs no index."""
    source = out / "source"
    source.mkdir(parents=True)
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(path, source / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    dist = out / "dist"
    flags = ["--wheel"] if wheel_only else []
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--no-isolation",
            *flags,
            "--outdir",
            str(dist),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return sorted(dist.iterdir())


def _pip_settings() -> dict[str, str]:
    """``pip config list`` as {key: value}; the environment's (``:env:``) win."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found: dict[str, str] = {}
    for line in sorted(done.stdout.splitlines(), key=lambda line: line.startswith(":env:")):
        scoped, sep, value = line.partition("=")
        if sep:
            found[scoped.rpartition(".")[2]] = value.strip().strip("'\"")
    return found


def uv_index_env() -> dict[str, str]:
    """uv pointed at the package indexes pip is configured with on this machine (pip's
    configuration is the machine's: uv does not read it)."""
    pip = _pip_settings()
    env: dict[str, str] = {}
    if "index-url" in pip:
        env["UV_DEFAULT_INDEX"] = pip["index-url"]
    if "extra-index-url" in pip:
        env["UV_INDEX"] = pip["extra-index-url"]  # both: space-separated
    if "find-links" in pip:
        env["UV_FIND_LINKS"] = ",".join(pip["find-links"].split())
    if "cert" in pip:
        env["SSL_CERT_FILE"] = pip["cert"]
    return env


def user_env(bin_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """A user's shell: ``PATH`` (with ``bin_dir`` first), ``HOME`` (the installers' caches)
    and the pip and uv settings of this machine, but nothing of the repository or of the
    test run."""
    path = os.pathsep.join(
        [*([str(bin_dir)] if bin_dir else []), str(BIN), "/usr/local/bin", "/usr/bin", "/bin"]
    )
    keep = {k: v for k, v in os.environ.items() if k == "HOME" or k.startswith("PIP_")}
    return {
        **keep,
        **uv_index_env(),
        "PATH": path,
        "UV_PYTHON_DOWNLOADS": "never",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def run(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``argv`` as the user would type it; fails with its output if it fails."""
    done = subprocess.run(
        list(argv), capture_output=True, text=True, timeout=300, env=dict(env), cwd=cwd
    )
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


OUTSIDE_THE_PACKAGE = ("config/", "docs/", "scripts/", ".venv", "README")
"""What a wheel install does not have: no help or example may point at it."""


def help_texts(proxy: Path, env: Mapping[str, str], cwd: Path) -> dict[str, str]:
    """Every subcommand's ``--help``, from the installed ``proxy`` executable."""
    texts = {}
    for sub in ((), ("example",), ("check",), ("health",), ("connect",)):  # demo: main's
        texts[" ".join(sub) or "main"] = run([str(proxy), *sub, "--help"], env, cwd).stdout
    return texts


async def call_the_demo(argv: Sequence[str], env: Mapping[str, str], workdir: Path) -> None:
    """Start ``argv`` (an installed ``mcp-resume-proxy`` with its arguments; the port is
    chosen by the system), ``initialize`` and call the demo's ``echo`` through it over
    Streamable HTTP, then stop it with SIGTERM: it exits 0."""
    log_path = workdir / "proxy.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            "--port",
            "0",
            "--log-format",
            "json",
            stdout=log_file,
            stderr=log_file,
            cwd=workdir,
            env={**env, "MCP_RESUME_PROXY_DRAIN_SECONDS": "0"},
        )
    try:
        port = await wait_listening(proc, log_path, f"{argv[0]}")
        async with aiohttp.ClientSession() as http:
            client = RawSession(http, f"http://127.0.0.1:{port}/mcp")
            await client.initialize()
            events = await client.request(
                2, "tools/call", {"name": "echo", "arguments": {"text": "from the wheel"}}
            )
            (answer,) = [m for m in messages(events) if m.get("id") == 2]
            assert answer["result"]["content"][0]["text"] == "from the wheel"
    finally:
        code = await stop_proxy(proc)
    assert code == 0, tail(log_path)
