"""``mcp-resume-proxy check FILE``: validation without starting anything, one error per
kind, each naming the file, the key path and what was expected; and ``${VAR}`` /
``${VAR:-default}`` interpolation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proxy.config import ConfigError, interpolate, load_config
from tests.support import ROOT

SHIPPED = sorted([*(ROOT / "config").glob("*.yaml"), *(ROOT / "config").glob("*.json")])


def run_check(*files: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", "check", *files],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        timeout=60,
    )


def test_the_shipped_configs_pass_with_their_environment() -> None:
    env = {"MCP_RESUME_PROXY_TOKEN_SECRET": "s" * 32, "MCP_UPSTREAM_TOKEN": "t"}
    done = run_check(*(str(p) for p in SHIPPED), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{p}: ok" for p in SHIPPED]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("listen: {port: 99999}\nupstream: {command: [x]}", "listen.port: must be 0..65535"),
        ("listen: {prot: 1}\nupstream: {command: [x]}", "listen.prot: unknown key"),
        ("sessions: {idle_timeout_seconds: -1}\nupstream: {command: [x]}", "greater than 0"),
        ("sessions: {max_sessions: many}\nupstream: {command: [x]}", "expected an integer"),
        ("tasks: {mode: sometimes}\nupstream: {command: [x]}", "tasks.mode: must be one of"),
        ("upstream: {command: [x], url: 'http://h/mcp'}", "give either command"),
        ("listen: {port: 1}", "upstream: no MCP server"),
        ("upstream: {command: ['${NOPE_NOT_SET}']}", "upstream.command[0]: environment variable"),
        ("upstream: {url: 'http://h/mcp', headers: {A: '${NOPE_NOT_SET}'}}", "upstream.headers.A"),
        ("store: {kind: sqlite}\nupstream: {command: [x]}", "streams.token_secret"),
        ("listen: [1, 2]\n", "listen: expected a mapping"),
        ("listen: {port: 1\n", "not valid YAML"),
    ],
)
def test_each_kind_of_error_names_the_file_and_the_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    done = run_check(str(path))
    assert done.returncode == 2
    assert done.stderr.startswith(f"{path}: "), done.stderr
    assert expected in done.stderr, done.stderr


def test_a_missing_file_and_several_files_at_once(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("upstream: {command: [python, server.py]}\n")
    done = run_check(str(good), str(tmp_path / "missing.yaml"))
    assert done.returncode == 2
    assert done.stdout == f"{good}: ok\n"
    assert "cannot read config file" in done.stderr


def test_interpolation_forms(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SET_VAR", "value")
    monkeypatch.setenv("EMPTY_VAR", "")
    monkeypatch.delenv("UNSET_VAR", raising=False)
    assert interpolate("a-${SET_VAR}-b", "k") == "a-value-b"
    assert interpolate("${UNSET_VAR:-fallback}", "k") == "fallback"
    assert interpolate("${EMPTY_VAR:-fallback}", "k") == "fallback"  # as the shell does
    assert interpolate("${EMPTY_VAR}", "k") == ""
    assert interpolate("$${SET_VAR}", "k") == "${SET_VAR}"  # escaped
    assert interpolate("${UNSET_VAR:-}", "k") == ""
    with pytest.raises(ConfigError, match="k: environment variable UNSET_VAR is not set"):
        interpolate("${UNSET_VAR}", "k")
    path = tmp_path / "c.yaml"
    path.write_text(
        "listen: {host: '${UNSET_VAR:-127.0.0.1}'}\n"
        "upstream:\n"
        "  command: [python, '${SET_VAR}.py']\n"
        "  env: {TOKEN: '${SET_VAR}'}\n"
        "  url: null\n"
        "  headers: {Authorization: 'Bearer ${SET_VAR}'}\n"
    )
    config = load_config(path)
    assert config.listen.host == "127.0.0.1"
    assert config.upstream.command == ["python", "value.py"]
    assert config.upstream.env == {"TOKEN": "value"}
    # Headers stay as written in the config object (no secret in it) until resolved.
    assert config.upstream.headers == {"Authorization": "Bearer ${SET_VAR}"}
    assert config.upstream.resolved_headers() == {"Authorization": "Bearer value"}


def test_the_config_reference_is_the_schemas() -> None:
    """config/README.md is generated from proxy/config.py: regenerate it with
    ``python -m proxy.config_doc > config/README.md`` when a key changes."""
    from proxy.config_doc import render

    assert (ROOT / "config" / "README.md").read_text() == render()
    for key in ("listen.port", "modern.pool.max_size", "tasks.mode", "upstream.restart_max"):
        assert f"| `{key}` |" in render()
