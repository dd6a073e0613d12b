"""The command line as a newcomer meets it: help, version, config errors."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from proxy import __version__
from proxy.cli_serve import settle_heap


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args], capture_output=True, text=True, timeout=60
    )


def test_help_and_version() -> None:
    out = run("--help")
    assert out.returncode == 0
    assert "-- CMD [ARGS...]" in out.stdout and "Last-Event-ID" in out.stdout
    assert "MCP_RESUME_PROXY_CONFIG" in out.stdout
    out = run("--version")
    assert out.returncode == 0 and __version__ in out.stdout


def test_config_errors_stop_the_start_with_the_key_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstream: {command: [python]}\nsse: {keepalive_secs: 3}\n")
    out = run("--config", str(bad))
    assert out.returncode == 2
    assert "sse.keepalive_secs: unknown key" in out.stderr
    out = run("--config", str(tmp_path / "missing.yaml"))
    assert out.returncode == 2 and "cannot read config file" in out.stderr
    out = run()
    assert out.returncode == 2 and "upstream.command" in out.stderr


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = run("--port", str(port), "--", sys.executable, "-m", "proxy.demo")
    assert out.returncode == 1 and "cannot listen" in out.stderr


def test_the_started_heap_is_left_out_of_full_collections() -> None:
    """``settle_heap`` (called by ``serve`` once listening) freezes what exists now."""
    try:
        settle_heap()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
