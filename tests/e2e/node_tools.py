"""The Node tools of the e2e tests, as installed in ``.tools/`` by scripts/install-node-tools.sh.

- ``node_binary()``: Node 22 (npm package ``node-linux-<arch>``).
- ``server_everything()``: the generated wrapper ``.tools/bin/server-everything`` that runs
  ``@modelcontextprotocol/server-everything`` (a real third-party MCP server) on that Node;
  its first argument is the transport (``stdio``, ``sse`` or ``streamableHttp``), and the HTTP
  modes listen on ``$PORT`` on every interface.
- ``node_modules()``: where ``@modelcontextprotocol/sdk`` (the official TypeScript SDK) is, for
  the ESM client scripts in ``tests/e2e/ts/`` (ESM ignores ``NODE_PATH``, so the scripts import
  the SDK by absolute path from ``MCP_TOOLS_NODE_MODULES``).

Missing tools fail the test with the command that installs them, never skip it.
``run_server_everything`` starts the server in an HTTP mode in a process group of its own
and always stops the whole group. server-everything listens on the ``$PORT`` it is given
(``0`` would work, but it logs the number it was given, not the one it got), so the test
gives it a port reserved for it (``tests.support.reserved_port``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT, eventually, reserved_port, wait_accepting

TOOLS = ROOT / ".tools"
INSTALL = "scripts/install-node-tools.sh"
STOP_DEADLINE_S = 10.0


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        pytest.fail(
            f"{what} is missing ({path}); run {INSTALL} first (scripts/test runs it)",
            pytrace=False,
        )
    return path


def node_modules() -> Path:
    """``.tools/node_modules``, holding the TypeScript SDK the client scripts import."""
    _require(TOOLS / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json", "the SDK")
    return TOOLS / "node_modules"


def ts_client2_modules() -> Path:
    """``.tools/ts-client2/node_modules``, holding ``@modelcontextprotocol/client`` 2.x
    (scripts/install-ts-client2.sh)."""
    modules = TOOLS / "ts-client2" / "node_modules"
    package = modules / "@modelcontextprotocol" / "client" / "package.json"
    if not package.exists():
        pytest.fail(
            f"@modelcontextprotocol/client is missing ({package}); "
            "run scripts/install-ts-client2.sh",
            pytrace=False,
        )
    return modules


def node_binary() -> Path:
    """The Node 22 binary (a symlink npm made in ``.tools/node_modules/.bin``)."""
    return _require(TOOLS / "node_modules" / ".bin" / "node", "Node 22")


def server_everything() -> Path:
    """The wrapper that runs ``@modelcontextprotocol/server-everything`` on Node 22."""
    _require(
        TOOLS / "node_modules" / "@modelcontextprotocol" / "server-everything" / "package.json",
        "@modelcontextprotocol/server-everything",
    )
    return _require(TOOLS / "bin" / "server-everything", "the server-everything wrapper")


async def stop_group(process: asyncio.subprocess.Process) -> None:
    """SIGTERM the process group ``process`` leads, SIGKILL it after a deadline; reap it.

    The group is signalled even when the leader has exited, so nothing it started stays.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), STOP_DEADLINE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    await process.wait()


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def group_gone(pgid: int, what: str, timeout: float = STOP_DEADLINE_S) -> None:
    """Wait until no process of group ``pgid`` (``what``) is left; orphans take a moment
    to be reaped."""
    await eventually(
        lambda: not group_alive(pgid), timeout=timeout, interval=0.05, what=f"{what} to be gone"
    )


@dataclass(frozen=True)
class RunningEverything:
    """server-everything in an HTTP mode, listening on ``port``."""

    mode: str
    port: int
    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.asynccontextmanager
async def run_server_everything(mode: str, workdir: Path) -> AsyncIterator[RunningEverything]:
    """``server-everything MODE`` (``sse`` or ``streamableHttp``) on a port reserved for it.

    Yields once the port accepts connections; stops the whole process group in any case and
    checks that nothing of it is left.
    """
    wrapper = server_everything()
    with reserved_port() as port:
        log_path = workdir / f"server-everything-{mode}-{port}.log"
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                str(wrapper),
                mode,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env={**os.environ, "PORT": str(port)},
                start_new_session=True,
            )
        try:
            await wait_accepting(process, port, log_path, f"server-everything {mode}")
            yield RunningEverything(mode, port, process, log_path)
        finally:
            await stop_group(process)
            await group_gone(process.pid, f"the processes of server-everything {mode}")
