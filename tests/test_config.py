from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import yaml

from proxy.cli import build_parser, resolve_config
from proxy.config import Bound, Config, ConfigError, config_from_mapping, load_config
from proxy.core.session import SessionSettings
from proxy.servers import servers_of

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
        ({"listen": {"port": -1}}, "listen.port: must be 0..65535, got -1"),
        ({"listen": {"port": 65536}}, "listen.port: must be 0..65535, got 65536"),
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
        ({"sse": {"max_stream_seconds": 0}}, "sse.max_stream_seconds: must be greater than 0"),
        ({"sessions": {"overflow": "drop"}}, "sessions.overflow: must be one of block, truncate"),
        ({"modern": {"dual_era": "both"}}, "modern.dual_era: must be one of modern, legacy"),
        (
            {"servers": {"a": {"command": ["x"], "dual_era": "auto"}}},
            "servers.a.dual_era: must be one of modern, legacy",
        ),
        ({"store": {"cluster": "yes"}}, "store.cluster: expected"),
        ({"store": {"namespace": "a{b}"}}, "store.namespace: non-empty, without braces"),
        (
            {"store": {"kind": "redis", "cluster": True, "url": "redis://h:7000/2"}},
            "store.url: a Redis Cluster has only database 0",
        ),
        (
            {"store": {"kind": "redis", "cluster": True, "url": "unix:///tmp/r.sock"}},
            "store.url: with store.cluster, a redis:// or rediss:// URL",
        ),
        # Once accepted: a negative grace or retention is a slip (0 is "at once").
        (
            {"sessions": {"completed_retention_seconds": -1}},
            "sessions.completed_retention_seconds: must not be negative, got -1.0",
        ),
        (
            {"upstream": {"stop_grace_seconds": -0.5}},
            "upstream.stop_grace_seconds: must not be negative, got -0.5",
        ),
    ],
)
def test_errors_name_the_key_path(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(data)
    assert str(info.value).startswith(message), str(info.value)


def test_zero_is_allowed_where_it_means_at_once() -> None:
    cfg = config_from_mapping(
        {"sessions": {"completed_retention_seconds": 0}, "upstream": {"stop_grace_seconds": 0}}
    )
    assert cfg.sessions.completed_retention_seconds == 0.0
    assert cfg.upstream.stop_grace_seconds == 0.0


def _keys(cls: Any, prefix: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Every leaf key of the schema: (path, annotated type, default)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _keys(tp, f"{path}.")
        else:
            default = f.default_factory() if callable(f.default_factory) else f.default
            yield path, tp, default


def _is_number(tp: Any) -> bool:
    if typing.get_origin(tp) is Annotated:
        return _is_number(typing.get_args(tp)[0])
    args = typing.get_args(tp)
    if args and type(None) in args:
        return any(_is_number(a) for a in args if a is not type(None))
    return tp in (int, float)


def _bound(tp: Any) -> Bound | None:
    rules = typing.get_args(tp)[1:] if typing.get_origin(tp) is Annotated else ()
    return next((r for r in rules if isinstance(r, Bound)), None)


NUMBER_KEYS = [(path, tp) for path, tp, _ in _keys(Config) if _is_number(tp)]


@pytest.mark.parametrize(("path", "tp"), NUMBER_KEYS, ids=[p for p, _ in NUMBER_KEYS])
def test_every_number_has_a_bound_on_its_field(path: str, tp: Any) -> None:
    bound = _bound(tp)
    assert bound is not None, f"{path}: give it Annotated[..., Positive / NonNegative / Bound]"
    # Just below the lower bound is refused, naming the key path.
    below = bound.low if not bound.low_allowed else bound.low - 1
    *sections, key = path.split(".")
    data: dict[str, Any] = {key: below}
    for section in reversed(sections):
        data = {section: data}
    with pytest.raises(ConfigError, match=rf"^{path}: must "):
        config_from_mapping(data)


def test_the_defaults_are_valid() -> None:
    assert config_from_mapping(dataclasses.asdict(Config())) == Config()


def test_the_session_defaults_are_the_cores() -> None:
    secret = b"s" * 32
    assert Config().session_settings(secret) == SessionSettings(token_secret=secret)


def test_local_stdio_example_lists_every_key_with_its_default() -> None:
    """config/local-stdio.yaml says it shows every key with its default: keep it so."""
    path = ROOT / "config" / "local-stdio.yaml"
    raw = yaml.safe_load(path.read_text())
    loaded = load_config(path)
    missing, differing = [], []
    for key, _, default in _keys(Config):
        node: Any = raw
        for part in key.split("."):
            node = node.get(part, KeyError) if isinstance(node, dict) else KeyError
        if node is KeyError:
            missing.append(key)
            continue
        value: Any = loaded
        for part in key.split("."):
            value = getattr(value, part)
        # upstream.command is the one key the example must set: its server to run.
        if key != "upstream.command" and value != default:
            differing.append(f"{key}: {value!r} (default {default!r})")
    assert not missing and not differing, (
        f"{path.name}: lacks {', '.join(missing) or 'nothing'}; "
        f"differs from the defaults: {'; '.join(differing) or 'nowhere'}"
    )


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


def test_the_drain_seconds_of_the_environment_win_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("listen: {drain_seconds: 12}\nupstream: {command: [a]}\n")
    args = build_parser().parse_args(["--config", str(path)])
    monkeypatch.delenv("MCP_RESUME_PROXY_DRAIN_SECONDS")  # (tests/conftest.py sets 0)
    assert resolve_config(args).listen.drain_seconds == 12
    assert resolve_config(build_parser().parse_args(["--", "a"])).listen.drain_seconds == 30
    monkeypatch.setenv("MCP_RESUME_PROXY_DRAIN_SECONDS", "0")
    assert resolve_config(args).listen.drain_seconds == 0
    monkeypatch.setenv("MCP_RESUME_PROXY_DRAIN_SECONDS", "2.5")
    assert resolve_config(args).listen.drain_seconds == 2.5
    for bad in ("soon", "-1", "3601", "nan"):
        monkeypatch.setenv("MCP_RESUME_PROXY_DRAIN_SECONDS", bad)
        with pytest.raises(ConfigError, match=r"MCP_RESUME_PROXY_DRAIN_SECONDS: expected seconds"):
            resolve_config(args)
    with pytest.raises(ConfigError, match=r"listen\.drain_seconds: must be 0\.\.3600"):
        config_from_mapping({"listen": {"drain_seconds": 3601}, "upstream": {"command": ["a"]}})


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


def test_dual_era_is_per_server_with_a_default_for_all() -> None:
    """``servers.NAME.dual_era`` wins; a server without one (or ``upstream.dual_era``)
    takes ``modern.dual_era`` (docs/modern.md#dual-era-clients)."""
    config = config_from_mapping(
        {
            "modern": {"dual_era": "legacy"},
            "servers": {
                "a": {"command": ["x"]},
                "b": {"command": ["x"], "dual_era": "modern"},
            },
        }
    )
    servers = servers_of(config)
    assert {name: server.dual_era for name, server in servers.items()} == {
        "a": "legacy",
        "b": "modern",
    }
    assert servers_of(config_from_mapping({"upstream": {"command": ["x"]}}))[
        "default"
    ].dual_era == ("modern")
