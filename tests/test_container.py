"""The image, without Docker: ``hadolint`` passes on the Dockerfile with no warning, and the
wheel, installed in a fresh virtualenv, runs the image's entry command with
``config/sidecar.yaml`` against the bundled demo server, as the container would."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp

from tests.downstream.sse_client import RawSession, messages
from tests.support import ROOT, tail, wait_listening

HADOLINT = Path(sys.executable).parent / "hadolint"


def test_hadolint_passes_with_no_warning() -> None:
    done = subprocess.run(
        [str(HADOLINT), str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


async def test_the_wheel_in_a_fresh_virtualenv_serves_as_the_container(tmp_path: Path) -> None:
    dist, fresh = tmp_path / "dist", tmp_path / "fresh"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(ROOT)],
        check=True,
        timeout=300,
    )
    (wheel,) = dist.glob("mcp_resume_proxy-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(fresh)], check=True, timeout=120)
    subprocess.run(
        [str(fresh / "bin" / "pip"), "install", "--quiet", str(wheel)], check=True, timeout=600
    )
    # The image's ENTRYPOINT with config/sidecar.yaml (its upstream: python3 -m proxy.demo),
    # from a directory that is not the repository: only the wheel can serve it. The port
    # and host come from the environment, as a container's would.
    workdir = tmp_path / "run"
    workdir.mkdir()
    env = {
        "PATH": f"{fresh / 'bin'}:/usr/bin:/bin",
        "MCP_RESUME_PROXY_PORT": "0",
        "MCP_RESUME_PROXY_HOST": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
    }
    log_path = tmp_path / "proxy.log"
    entry = ["mcp-resume-proxy", "--log-format", "json"]
    config = ["--config", str(ROOT / "config" / "sidecar.yaml")]
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            str(fresh / "bin" / entry[0]),
            *entry[1:],
            *config,
            stdout=log_file,
            stderr=log_file,
            cwd=workdir,
            env=env,
        )
    try:
        port = await wait_listening(proc, log_path, "the wheel's proxy")
        url = f"http://127.0.0.1:{port}/mcp"
        async with aiohttp.ClientSession() as http:
            client = RawSession(http, url)
            await client.initialize()
            events = await client.request(
                2, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}
            )
            (answer,) = [m for m in messages(events) if m.get("id") == 2]
            assert answer["result"]["content"][0]["text"] == "hi"
        # The image's HEALTHCHECK command, run by the fresh interpreter.
        health = subprocess.run(
            [
                str(fresh / "bin" / "python"),
                "-c",
                "import urllib.request, os; urllib.request.urlopen('http://127.0.0.1:' + "
                "os.environ.get('MCP_RESUME_PROXY_PORT', '8808') + '/healthz', timeout=2)",
            ],
            env={**env, "MCP_RESUME_PROXY_PORT": str(port)},
            timeout=30,
        )
        assert health.returncode == 0
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0, tail(log_path)
