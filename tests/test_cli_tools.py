"""``health``'s target, ``example`` and ``demo`` as pure functions and in-process calls;
the installed commands are run by tests/test_wheel.py and tests/test_container.py."""

from __future__ import annotations

import dataclasses
import socket
import threading
from pathlib import Path

import pytest

from proxy.cli_tools import (
    EXAMPLES,
    check_health,
    demo_argv,
    example_main,
    example_text,
    probe_target,
)
from proxy.config import Config, ConfigError
from proxy.config_env import settings_from_file_and_env
from proxy.config_sections import ListenConfig
from tests.support import ROOT


def test_health_asks_a_wildcard_bind_on_loopback_with_a_host_it_serves() -> None:
    listen = ListenConfig(host="0.0.0.0", port=8808)
    assert probe_target(listen) == ("http://127.0.0.1:8808/healthz", "127.0.0.1:8808")
    six = dataclasses.replace(listen, host="::")
    assert probe_target(six) == ("http://[::1]:8808/healthz", "[::1]:8808")
    named = dataclasses.replace(listen, allowed_hosts=["proxy.internal:8808"])
    assert probe_target(named) == ("http://127.0.0.1:8808/healthz", "proxy.internal:8808")
    anything = dataclasses.replace(listen, host="10.1.2.3", allowed_hosts=["*"])
    assert probe_target(anything) == ("http://10.1.2.3:8808/healthz", "10.1.2.3:8808")
    with pytest.raises(ConfigError, match=r"listen\.port: 0"):
        probe_target(dataclasses.replace(listen, port=0))


def test_example_prints_the_shipped_file_and_lists_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, (file, _) in EXAMPLES.items():
        assert example_text(name) == (ROOT / "config" / file).read_text()
    assert example_main([]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(EXAMPLES)
    with pytest.raises(SystemExit):
        example_main(["nonesuch"])


def test_demo_is_the_proxy_in_front_of_the_bundled_server() -> None:
    argv = demo_argv(["--port", "0"])
    assert argv[:3] == ["--port", "0", "--"] and argv[-2:] == ["-m", "proxy.demo"]
    with pytest.raises(ConfigError, match="no command after '--'"):
        demo_argv(["--", "python", "server.py"])


def test_an_empty_host_variable_lets_the_file_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image sets MCP_RESUME_PROXY_HOST=0.0.0.0; ``-e MCP_RESUME_PROXY_HOST=`` gives
    listen.host back to the file (docs/reference.md, The image)."""
    file = tmp_path / "proxy.yaml"
    file.write_text("listen: {host: 10.0.0.5, port: 9000}\n")
    monkeypatch.setenv("MCP_RESUME_PROXY_HOST", "0.0.0.0")
    assert settings_from_file_and_env(str(file)).listen.host == "0.0.0.0"
    monkeypatch.setenv("MCP_RESUME_PROXY_HOST", "")
    monkeypatch.setenv("MCP_RESUME_PROXY_CONFIG", str(file))
    listen = settings_from_file_and_env(None).listen
    assert (listen.host, listen.port) == ("10.0.0.5", 9000)


def answering(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    """A listener on a free loopback port that answers one connection with ``reply``: what
    is on the port when it is not the proxy (or not the proxy's /healthz)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def http_reply(status: int, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status} x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"garbage\r\n\r\n", "not an HTTP answer (BadStatusLine)"),
        (http_reply(421, b"{}"), "421 (Host refused"),
        (http_reply(503, b'{"status": "stopping"}'), "503 stopping"),
        (http_reply(404, b"<html>"), "404 (not the proxy's /healthz answer)"),
    ],
)
def test_health_says_in_one_line_why_the_port_is_not_healthy(reply: bytes, said: str) -> None:
    listener, thread = answering(reply)
    try:
        port = listener.getsockname()[1]
        config = Config(listen=ListenConfig(port=port))
        healthy, reason = check_health(config, timeout=10)
    finally:
        thread.join(10)
        listener.close()
    assert not healthy and said in reason and "\n" not in reason, reason
