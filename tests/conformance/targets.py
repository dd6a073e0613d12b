"""Servers the conformance suite can be pointed at, each started on 127.0.0.1 and always stopped.

A target is a context manager factory: given a scratch directory, it starts what is to be
judged, yields the Streamable HTTP URL, and stops everything on exit.

- ``proxy`` (the default): ``mcp-resume-proxy`` in front of the stdio conformance fixture.
- ``sdk``: the same fixture served over Streamable HTTP by the ``mcp`` SDK itself, the
  reference the proxy is compared with (a failure here is the fixture's, not the proxy's).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Final

from .suite import REPO_ROOT

FIXTURE_SERVER: Final = REPO_ROOT / "tests" / "fixtures" / "conformance_server.py"
SDK_HTTP_SERVER: Final = Path(__file__).resolve().parents[1] / "fixtures" / "serve_http.py"
HOST: Final = "127.0.0.1"
START_DEADLINE_S: Final = 60.0
STOP_GRACE_S: Final = 15.0
START_ATTEMPTS: Final = 3

Target = Callable[[Path], contextlib.AbstractContextManager[str]]


class TargetStartError(RuntimeError):
    """The server under test did not come up."""


def free_port() -> int:
    """A port that was free a moment ago (the caller retries if another process takes it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def proxy_command(port: int) -> list[str]:
    """``mcp-resume-proxy`` from this interpreter's environment, else ``python -m proxy``."""
    script = Path(sys.executable).parent / "mcp-resume-proxy"
    launcher = [str(script)] if script.is_file() else [sys.executable, "-m", "proxy"]
    return [
        *launcher,
        "--host",
        HOST,
        "--port",
        str(port),
        "--",
        sys.executable,
        str(FIXTURE_SERVER),
    ]


def sdk_http_command(port: int) -> list[str]:
    return [sys.executable, str(SDK_HTTP_SERVER), "--host", HOST, "--port", str(port)]


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-limit:]


def _port_answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


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
def http_server_process(
    command_for_port: Callable[[int], Sequence[str]], workdir: Path, name: str
) -> Iterator[str]:
    """Start ``command_for_port(port)`` until one answers on its port; yield its MCP URL.

    The process runs in its own session (so a stuck one can be killed with everything it
    started); its output goes to ``workdir/<name>-<attempt>.log``.
    """
    failures: list[str] = []
    for attempt in range(1, START_ATTEMPTS + 1):
        port = free_port()
        command = list(command_for_port(port))
        log_path = workdir / f"{name}-{attempt}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + START_DEADLINE_S
            while process.poll() is None and time.monotonic() < deadline:
                if _port_answers(port):
                    break
                time.sleep(0.05)  # polling a condition, with a deadline
            else:
                reason = (
                    f"exited with {process.returncode}"
                    if process.poll() is not None
                    else f"did not listen on {HOST}:{port} within {START_DEADLINE_S:.0f} s"
                )
                failures.append(f"{' '.join(command)}: {reason}\n{_tail(log_path)}")
                continue
            yield f"http://{HOST}:{port}/mcp"
            return
        finally:
            _stop(process)
    raise TargetStartError(f"{name} did not start:\n" + "\n---\n".join(failures))


def proxy_target(workdir: Path) -> contextlib.AbstractContextManager[str]:
    return http_server_process(proxy_command, workdir, "proxy")


def sdk_target(workdir: Path) -> contextlib.AbstractContextManager[str]:
    return http_server_process(sdk_http_command, workdir, "sdk-http")


TARGETS: Final[dict[str, Target]] = {"proxy": proxy_target, "sdk": sdk_target}
