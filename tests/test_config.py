from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import build_parser, resolve_config
from proxy.config import Config, ConfigError, config_from_mapping, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_examples_load() -> None:
    for path in sorted((ROOT / "config").glob("*.yaml")):
        assert isinstance(load_config(path), Config), path


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"sse": {"keepalive": 3}}, "sse.keepalive: unknown key"),
        ({"nope": 1}, "nope: unknown key"),
        ({"listen": {"port": "x"}}, "listen.port: expected an integer"),
        ({"listen": {"port": -1}}, "listen.port: must not be negative"),
        ({"listen": {"port": 65536}}, "listen.port: must be 0..65535"),
        ({"upstream": {"command": "python x.py"}}, "upstream.command: expected a list"),
        ({"upstream": {"env": {"A": [1]}}}, "upstream.env.A: expected a string"),
        ({"log": {"format": "xml"}}, "log.format: must be one of"),
        ({"sse": {"max_stream_seconds": True}}, "sse.max_stream_seconds: expected a number"),
        ([1], "config: expected a mapping"),
        ({"streams": {"notification_shape": "deep"}}, "streams.notification_shape: must be one"),
        ({"streams": {"create_after_ms": -1}}, "streams.create_after_ms: must not be negative"),
        ({"streams": {"resume_interval": {"min": 9, "max": 3}}}, "streams.resume_interval.min"),
        ({"streams": {"resume_interval": {"max": 0}}}, "streams.resume_interval.max: must be"),
        ({"streams": {"token_secret": "short"}}, "streams.token_secret: use at least"),
        ({"upstream": {"command": ["a"], "url": "http://x/mcp"}}, "upstream: give either"),
        ({"upstream": {"url": "ftp://x"}}, "upstream.url: expected an http(s)://"),
        ({"upstream": {"url": "http://x", "transport": "stdio"}}, "upstream.transport: stdio"),
        ({"upstream": {"transport": "sse"}}, "upstream.transport: sse needs upstream.url"),
        ({"upstream": {"transport": "grpc"}}, "upstream.transport: must be one of"),
        ({"listen": {"path": "/ws"}}, "listen.path: /ws is taken"),
    ],
)
def test_errors_name_the_key_path(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(data)
    assert str(info.value).startswith(message), str(info.value)


def test_cli_flags_override_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "listen: {port: 9000}\nupstream: {command: [a, b]}\nsse: {max_stream_seconds: 2}\n"
    )
    cfg = resolve_config(build_parser().parse_args(["--config", str(path), "--port", "9001"]))
    assert cfg.listen.port == 9001 and cfg.upstream.command == ["a", "b"]
    assert cfg.session_settings().max_stream_seconds == 2.0
    cfg = resolve_config(build_parser().parse_args(["--", "python", "-m", "x", "--flag"]))
    assert cfg.upstream.command == ["python", "-m", "x", "--flag"]


def test_no_command_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"upstream: no MCP server"):
        resolve_config(build_parser().parse_args([]))


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://h/mcp", "streamable-http"),
        ("https://h/", "streamable-http"),
        ("http://h/sse", "sse"),
        ("http://h/v1/sse/?x=1", "sse"),
        ("ws://h/mcp", "websocket"),
        ("WSS://h", "websocket"),
    ],
)
def test_the_upstream_transport_follows_the_url(url: str, kind: str) -> None:
    assert config_from_mapping({"upstream": {"url": url}}).upstream.kind == kind
    forced = config_from_mapping({"upstream": {"url": url, "transport": "sse"}})
    assert forced.upstream.kind == "sse"
    assert config_from_mapping({"upstream": {"command": ["x"]}}).upstream.kind == "stdio"


def test_upstream_url_headers_and_env_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SECRET_T", "s3cr3t")
    args = ["--upstream", "http://h/mcp", "--header", "Authorization: Bearer ${SECRET_T}"]
    cfg = resolve_config(build_parser().parse_args(args))
    assert cfg.upstream.url == "http://h/mcp" and not cfg.upstream.command
    assert cfg.upstream.resolved_headers() == {"Authorization": "Bearer s3cr3t"}
    monkeypatch.delenv("SECRET_T")
    with pytest.raises(ConfigError, match=r"upstream\.headers\.Authorization: environment"):
        resolve_config(build_parser().parse_args(args))
    with pytest.raises(ConfigError, match="--header: expected"):
        resolve_config(build_parser().parse_args(["--upstream", "http://h", "--header", "x"]))
    with pytest.raises(ConfigError, match="not both"):
        resolve_config(build_parser().parse_args(["--upstream", "http://h", "--", "cmd"]))
    # A command on the command line wins over a file's url, and the environment's url
    # is used when nothing else names a server.
    path = tmp_path / "c.yaml"
    path.write_text("upstream: {url: 'ws://h/mcp'}\n")
    cfg = resolve_config(build_parser().parse_args(["--config", str(path), "--", "srv"]))
    assert cfg.upstream.command == ["srv"] and cfg.upstream.url is None
    monkeypatch.setenv("MCP_RESUME_PROXY_UPSTREAM_URL", "http://env/sse")
    assert resolve_config(build_parser().parse_args([])).upstream.kind == "sse"
