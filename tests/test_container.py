"""The image, without Docker: ``hadolint`` passes on the Dockerfile with no warning, and
what the Dockerfile says the container runs is run as the container would run it.

The Dockerfile is read, not copied: its ``ENV``, ``WORKDIR``, ``VOLUME``, ``USER``,
``ENTRYPOINT``, ``CMD`` and ``HEALTHCHECK``. The wheel is installed in a fresh virtualenv;
the entry command (after its init, ``tini --``) runs as the image's user (its uid when the
test runs as root, else the test's own non-root user) from a fresh data directory that
user owns, as ``WORKDIR``/``VOLUME`` make it, with ``store.kind: sqlite`` and no path:
the database is created there. The ``HEALTHCHECK`` command, with the container's
environment, exits 0 while the proxy serves and 1 once it is gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.downstream.sse_client import RawSession, messages
from tests.support import ROOT, stop_proxy, tail, wait_listening
from tests.wheel_support import BASE_PYTHON, BIN, build_dist, run, user_env

HADOLINT = Path(sys.executable).parent / "hadolint"


def test_hadolint_passes_with_no_warning() -> None:
    done = subprocess.run(
        [str(HADOLINT), str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_build_context_is_what_the_dockerfile_copies() -> None:
    """.dockerignore lets in exactly the sources the COPY lines name."""
    copied = set()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            copied.update(line.split()[1:-1])
    allowed = {
        line[1:]
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert copied == allowed, (copied, allowed)


@dataclass
class Image:
    """What a container of the image runs, as the Dockerfile's final stage says."""

    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    volumes: list[str] = field(default_factory=list)
    user: str = "0"
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    healthcheck: list[str] = field(default_factory=list)


def read_image(text: str) -> Image:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    image = Image()
    for instruction in "\n".join(lines).replace("\\\n", " ").splitlines():
        keyword, _, rest = instruction.strip().partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            image = Image()  # only the last stage is the image
        elif keyword == "ENV":
            for word in shlex.split(rest):
                name, _, value = word.partition("=")
                image.env[name] = value
        elif keyword == "WORKDIR":
            image.workdir = rest.strip()
        elif keyword == "VOLUME":
            image.volumes = json.loads(rest)
        elif keyword == "USER":
            image.user = rest.strip()
        elif keyword == "ENTRYPOINT":
            image.entrypoint = json.loads(rest)
        elif keyword == "CMD":
            image.cmd = json.loads(rest)
        elif keyword == "HEALTHCHECK":
            image.healthcheck = json.loads(rest.partition(" CMD ")[2])
    return image


def as_user(uid: int) -> dict[str, Any]:
    """subprocess arguments that run a child as ``uid`` (its own group, no other)."""
    return {"user": uid, "group": uid, "extra_groups": []} if os.getuid() == 0 else {}


def interpreter_for(uid: int) -> Path:
    """A Python >= 3.11 that ``uid`` may run (the test's own may sit in a root-only home)."""
    for candidate in (BASE_PYTHON, Path("/usr/local/bin/python3.11"), Path("/usr/bin/python3")):
        probe = [str(candidate), "-c", "import sys; assert sys.version_info >= (3, 11)"]
        try:
            if subprocess.run(probe, timeout=60, **as_user(uid)).returncode == 0:
                return candidate
        except OSError:  # missing, or not for uid
            continue
    raise AssertionError(f"no Python >= 3.11 that uid {uid} may run")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A temporary directory another uid may enter (pytest's tmp_path is the test's own)."""
    path = Path(tempfile.mkdtemp(prefix="mcp-resume-proxy-image-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def test_the_image_command_as_its_user_keeps_sqlite_in_its_data_volume(
    shared_dir: Path,
) -> None:
    image = read_image((ROOT / "Dockerfile").read_text())
    # What the image promises: an init as PID 1, all interfaces, a non-root user, a data
    # directory that is the working directory (a relative store.path lands there) and a
    # volume, and a health check that reads the config as the proxy does.
    init, command = image.entrypoint[:2], image.entrypoint[2:] + image.cmd
    assert init == ["/usr/bin/tini", "--"], image.entrypoint
    assert image.env["MCP_RESUME_PROXY_HOST"] == "0.0.0.0"
    assert image.workdir in image.volumes, (image.workdir, image.volumes)
    assert image.healthcheck == ["mcp-resume-proxy", "health"], image.healthcheck
    uid = int(image.user) if os.getuid() == 0 else os.getuid()
    assert uid != 0

    (wheel,) = build_dist(shared_dir / "build", wheel_only=True)
    venv = shared_dir / "venv"
    installer = user_env()
    python = interpreter_for(uid)
    run([str(BIN / "uv"), "venv", "--python", str(python), str(venv)], installer, shared_dir)
    pip = [str(BIN / "uv"), "pip", "install", "--python", str(venv / "bin" / "python")]
    run([*pip, str(wheel)], installer, shared_dir)

    data = shared_dir / "data"  # the image's /data: install -d -o UID -g UID -m 0750
    data.mkdir(mode=0o750)
    if os.getuid() == 0:
        os.chown(data, uid, uid)
    config = shared_dir / "proxy.yaml"
    config.write_text("store:\n  kind: sqlite\n")  # no path: the default, relative one
    config.chmod(0o644)
    env = {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",  # the image's pip installs
        "HOME": str(data),
        **image.env,
        "MCP_RESUME_PROXY_CONFIG": str(config),
        "MCP_RESUME_PROXY_TOKEN_SECRET": "a-test-secret-not-a-real-one",
        "MCP_RESUME_PROXY_DRAIN_SECONDS": "0",
    }
    health_env = {**env}
    log_path = shared_dir / "proxy.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdout=log_file,
            stderr=log_file,
            cwd=data,
            env={**env, "MCP_RESUME_PROXY_PORT": "0"},  # the test's only change: any port
            **as_user(uid),
        )
    try:
        port = await wait_listening(proc, log_path, "the image's command")
        async with aiohttp.ClientSession() as http:
            client = RawSession(http, f"http://127.0.0.1:{port}/mcp")
            await client.initialize()
            events = await client.request(
                2, "tools/call", {"name": "echo", "arguments": {"text": "in the image"}}
            )
            (answer,) = [m for m in messages(events) if m.get("id") == 2]
            assert answer["result"]["content"][0]["text"] == "in the image"
        health_env["MCP_RESUME_PROXY_PORT"] = str(port)  # as if the image had set it

        def health() -> subprocess.CompletedProcess[str]:
            """The image's HEALTHCHECK command, as its user, in its data directory."""
            return subprocess.run(
                image.healthcheck,
                capture_output=True,
                text=True,
                timeout=60,
                env=health_env,
                cwd=data,
                **as_user(uid),
            )

        healthy = health()
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr
        assert healthy.stdout.startswith(f"ok: http://127.0.0.1:{port}/healthz: 200 ok")
    finally:
        code = await stop_proxy(proc)
    assert code == 0, tail(log_path)
    database = data / "mcp-resume-proxy.db"
    assert database.is_file() and database.stat().st_uid == uid, sorted(os.listdir(data))
    gone = health()
    assert gone.returncode == 1 and gone.stdout.startswith("unhealthy: "), gone.stdout
    assert len(gone.stdout.strip().splitlines()) == 1, gone.stdout
