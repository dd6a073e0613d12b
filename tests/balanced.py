"""Replicas on one Redis behind a real HAProxy (tests/balancer.py), and the clients the
balancer tests and the nemesis drive through it: :func:`cluster` starts it all,
:func:`ws_connect` opens a ``/ws`` socket through the balancer, :func:`shim_host` runs
the stdio shim (``mcp-resume-proxy connect URL``) under the official SDK's stdio client.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession, ElicitationFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from tests.balancer import Balancer, balancer
from tests.downstream.ws_client import Client
from tests.replica_set import ReplicaSet, replica_set
from tests.support import ROOT


@dataclass
class Cluster:
    replicas: ReplicaSet
    lb: Balancer


@contextlib.asynccontextmanager
async def cluster(
    directory: Path,
    store: dict[str, Any] | list[dict[str, Any]],
    count: int = 3,
    env: dict[str, str] | None = None,
    **sections: dict[str, Any],
) -> AsyncIterator[Cluster]:
    """``count`` replicas on ``store`` (or replica i on ``store[i]``) behind haproxy,
    every replica in rotation."""
    async with (
        replica_set(directory, count, store, env, **sections) as replicas,
        balancer(directory / "haproxy", replicas.ports) as lb,
    ):
        await lb.wait_up()
        yield Cluster(replicas, lb)


@contextlib.asynccontextmanager
async def ws_connect(lb: Balancer, session_id: str | None = None) -> AsyncIterator[Client]:
    """A ``/ws`` socket through the balancer (``mcp`` subprotocol), resuming
    ``session_id`` when given."""
    headers = {"Mcp-Session-Id": session_id} if session_id else {}
    async with connect(
        lb.ws_url,
        subprotocols=[Subprotocol("mcp")],
        additional_headers=headers,
        proxy=None,
        open_timeout=30,
    ) as ws:
        yield Client(ws)


def shim_params(url: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        # Gives up reconnecting (connection_lost, proxy_unreachable) within the nemesis's
        # bound for a call (20 s), so a call always ends in time with what the shim says.
        args=[
            *("-m", "proxy", "connect", url, "--log-level", "debug"),
            *("--reconnect-max-seconds", "15"),
        ],
        cwd=str(ROOT),
        env={"PYTHONUNBUFFERED": "1"},
    )


@contextlib.asynccontextmanager
async def shim_host(
    log_path: Path, url: str, elicitation: ElicitationFnT | None = None
) -> AsyncIterator[ClientSession]:
    """The official SDK stdio client running the shim on ``url``, initialized."""
    with log_path.open("a") as errlog:
        async with (
            stdio_client(shim_params(url), errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=elicitation) as session,
        ):
            await session.initialize()
            yield session
