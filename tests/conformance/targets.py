"""Servers the conformance suite can be pointed at, each started on 127.0.0.1 and always stopped.

A target is a context manager factory: given a scratch directory, it starts what is to be
judged on a port the system picks (``--port 0``; the server says which one it bound), yields
the Streamable HTTP URL, and stops everything on exit.

- ``proxy`` (the default): ``mcp-resume-proxy`` in front of the stdio conformance fixture.
- ``sdk``: the same fixture served over Streamable HTTP by the ``mcp`` SDK itself, the
  reference the proxy is compared with (a failure here is the fixture's, not the proxy's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from tests.support import wait_listening

from .suite import REPO_ROOT

FIXTURE_SERVER: Final = REPO_ROOT / "tests" / "fixtures" / "conformance_server.py"
SDK_HTTP_SERVER: Final = Path(__file__).resolve().parents[1] / "fixtures" / "serve_http.py"
HOST: Final = "127.0.0.1"
START_DEADLINE_S: Final = 60.0
STOP_GRACE_S: Final = 15.0

Target = Callable[[Path], contextlib.AbstractContextManager[str]]


class TargetStartError(RuntimeError):
    """The server under test did not come up."""


def proxy_command(*options: str) -> list[str]:
    """``mcp-resume-proxy OPTIONS`` from this interpreter's environment (else ``python -m
    proxy``) on a port the system picks, in front of the stdio fixture server."""
    script = Path(sys.executable).parent / "mcp-resume-proxy"
    launcher = [str(script)] if script.is_file() else [sys.executable, "-m", "proxy"]
    return [
        *launcher,
        *options,
        "--host",
        HOST,
        "--port",
        "0",
        "--",
        sys.executable,
        str(FIXTURE_SERVER),
    ]


def sdk_http_command() -> list[str]:
    return [sys.executable, str(SDK_HTTP_SERVER), "--host", HOST, "--port", "0"]


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the proxy then stops its own server processes), SIGKILL the group if stuck."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_GRACE_S)


@contextlib.contextmanager
def http_server_process(command: Sequence[str], workdir: Path, name: str) -> Iterator[str]:
    """Start ``command`` (a server on port 0), yield its MCP URL once it said which port.

    The process runs in its own session (so a stuck one can be killed with everything it
    started); its output goes to ``workdir/<name>.log``.
    """
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(command),
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        try:  # the suite is synchronous: run the (async) wait in a loop of its own
            port = asyncio.run(wait_listening(process, log_path, name, START_DEADLINE_S))
        except AssertionError as exc:
            raise TargetStartError(f"{' '.join(command)}: {exc}") from None
        yield f"http://{HOST}:{port}/mcp"
    finally:
        _stop(process)


def proxy_target(workdir: Path) -> contextlib.AbstractContextManager[str]:
    return http_server_process(proxy_command(), workdir, "proxy")


def sdk_target(workdir: Path) -> contextlib.AbstractContextManager[str]:
    return http_server_process(sdk_http_command(), workdir, "sdk-http")


TARGETS: Final[dict[str, Target]] = {"proxy": proxy_target, "sdk": sdk_target}
