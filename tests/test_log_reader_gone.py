"""The proxy's log has nowhere to go (proxy/logs.py): a real proxy process whose stderr is
a pipe the test closes once it listens, as when the program reading it (a log shipper,
``| tee``, a host that stopped reading) goes away.

Every later log line fails to be written (EPIPE). The proxy goes on: sessions start,
calls are answered, the lines it could not write are counted in ``/metrics``
(``mcp_resume_proxy_log_lines_dropped``), and it stops cleanly on SIGTERM. Was: the first
log line after the pipe closed raised into the code that logged it, and the proxy
exited with status 1.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path

import aiohttp
import yaml

from tests.downstream.sse_client import RawSession, messages
from tests.support import FIXTURE, ROOT, tool_call


async def test_the_proxy_serves_on_when_its_log_cannot_be_written(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "listen": {"host": "127.0.0.1", "port": 0},
                "upstream": {"command": FIXTURE, "stop_grace_seconds": 1},
                "log": {"format": "json", "level": "debug"},
            }
        )
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "proxy", "--config", str(config)),
        cwd=str(ROOT),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        port = None
        async with asyncio.timeout(30):
            while port is None:
                line = await proc.stderr.readline()
                assert line, "the proxy ended before it listened"
                event = json.loads(line)
                if event.get("event") == "proxy_listening":
                    port = int(event["port"])
        proc.stderr.feed_eof()
        transport = proc._transport.get_pipe_transport(2)  # type: ignore[attr-defined]
        transport.close()  # the reader goes: every later write gets EPIPE
        url = f"http://127.0.0.1:{port}/mcp"
        async with aiohttp.ClientSession() as http:
            client = RawSession(http, url)
            await client.initialize()
            for rid in range(1, 4):
                echo = tool_call(rid, "echo", {"text": f"still {rid}"})["params"]
                got = messages(await client.request(rid, "tools/call", echo))
                assert got[-1]["result"]["content"][0]["text"] == f"still {rid}"
            async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                text = await resp.text()
            dropped = re.search(r"^mcp_resume_proxy_log_lines_dropped (\S+)$", text, re.M)
            assert dropped is not None and float(dropped.group(1)) > 0
        assert proc.returncode is None
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
