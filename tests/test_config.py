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
        ({"listen": {"port": 0}}, "listen.port: must be greater than 0"),
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
    with pytest.raises(ConfigError, match=r"upstream\.command"):
        resolve_config(build_parser().parse_args([]))
