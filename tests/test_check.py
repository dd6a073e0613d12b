"""``mcp-resume-proxy check FILE``: validation without starting anything, one error per
kind, each naming the file, the key path and what was expected; every problem of a file
in one run, named as the file names its keys; strict JSON for ``.json``; and ``${VAR}`` /
``${VAR:-default}`` interpolation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.cli import check, check_main
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
        (
            "upstream: {url: 'http://h/mcp', oauth: {grant: client_credentials, client_id: c,"
            " client_secret: '${NOPE_NOT_SET}'}}",
            "upstream.oauth.client_secret: environment variable",
        ),
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
    assert config.upstream.env == {"TOKEN": "value"}
    # The command and headers stay as written in the config object (no secret in it, and
    # logs show them so) until resolved when the server starts.
    assert config.upstream.command == ["python", "${SET_VAR}.py"]
    assert config.upstream.resolved_command() == ["python", "value.py"]
    assert config.upstream.headers == {"Authorization": "Bearer ${SET_VAR}"}
    assert config.upstream.resolved_headers() == {"Authorization": "Bearer value"}


def test_the_config_reference_is_the_schemas() -> None:
    """config/README.md is generated from the schema (proxy/config.py and the modules of
    its sections): regenerate it with ``python -m proxy.config_doc > config/README.md``
    when a key changes. Its header names every module a section is defined in."""
    from proxy.config import Config
    from proxy.config_doc import render

    text = render()
    assert (ROOT / "config" / "README.md").read_text() == text
    for key in ("listen.port", "modern.pool.max_size", "tasks.mode", "upstream.restart_max"):
        assert f"| `{key}` |" in text
    header = text.partition("\n## ")[0]
    config = Config()
    for section in (config, config.listen, config.upstream, config.upstream.oauth):
        where = type(section).__module__.replace(".", "/") + ".py"
        assert f"`{where}`" in header, f"{where} is not named in: {header}"


# --- every problem in one run, as the file names its keys (issue 20 item 8) ------------


def problems_of(tmp_path: Path, name: str, text: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) ``check`` finds in a file ``name`` holding ``text``."""
    path = tmp_path / name
    path.write_text(text)
    found = check(str(path))
    return found.errors, found.warnings


def test_every_error_of_a_file_is_named_in_one_run(tmp_path: Path) -> None:
    errors, _ = problems_of(
        tmp_path,
        "bad.yaml",
        "listen: {port: 99999, prot: 1, path: /ws}\n"
        "sessions: {idle_timeout_seconds: -1, max_sessions: many}\n"
        "tasks: {mode: sometimes}\n"
        f"upstream: {{command: ['{sys.executable}'], env: {{A: [1]}}}}\n"
        "streams: {token_secret: short, resume_interval: {min: 9, max: 3}}\n"
        "modern: {pool: {size: 8, max_size: 2}}\n"
        "auth: {tokens: [{token: tiny, principal: ''}]}\n",
    )
    assert [e.partition(": ")[0] for e in errors] == [
        "listen.port",
        "listen.prot",
        "sessions.idle_timeout_seconds",
        "sessions.max_sessions",
        "tasks.mode",
        "upstream.env.A",
        "streams.resume_interval.min",
        "streams.token_secret",
        "auth.tokens[0].token",
        "auth.tokens[0].principal",
        "modern.pool.max_size",
        "listen.path",
    ]


def test_a_wrong_key_is_named_once_not_again_by_the_rules_that_need_it(tmp_path: Path) -> None:
    errors, _ = problems_of(tmp_path, "c.yaml", "upstream: {command: 5}\n")
    assert errors == ["upstream.command: expected a list, got int 5"]
    # A problem of its own beside a wrong key is still named.
    errors, _ = problems_of(
        tmp_path,
        "c.yaml",
        f"upstream: {{command: ['{sys.executable}'], url: 'http://h/mcp', env: {{A: [1]}}}}\n",
    )
    assert [e.partition(": ")[0] for e in errors] == ["upstream.env.A", "upstream"]
    errors, warnings = problems_of(tmp_path, "c.yaml", "upstream: {command: ['${UNSET_P_}']}\n")
    assert len(errors) == 1 and errors[0].startswith("upstream.command[0]: environment")
    assert warnings == []  # not "${UNSET_P_} is not on PATH" as well
    errors, _ = problems_of(tmp_path, "c.yaml", "upstream: {url: '${UNSET_URL_FOR_TEST}'}\n")
    assert errors == [
        "upstream.url: environment variable UNSET_URL_FOR_TEST is not set (and no :-default)"
    ]
    errors, _ = problems_of(
        tmp_path,
        "c.yaml",
        "servers: {a: {url: 'http://h/mcp', headers: {A: '${UNSET_A_}', B: '${UNSET_B_}'}},"
        " b: {command: 7}}\n",
    )
    assert [e.partition(": ")[0] for e in errors] == [
        "servers.b.command",
        "servers.a.headers.A",
        "servers.a.headers.B",
    ]


def test_mcp_servers_entries_are_named_as_the_file_has_them(tmp_path: Path) -> None:
    servers = {
        "files": {"command": sys.executable, "args": ["-m", {"not": "a string"}]},
        "remote": {"serverUrl": "ftp://h/", "type": "carrier-pigeon"},
        "more": {"command": "py", "env": {"TOKEN": {"nested": "sk-secret-value"}}},
        "also": {"env": {}},
        "x.y": {"httpUrl": "h", "comand": 1},
    }
    errors, warnings = problems_of(tmp_path, "servers.json", json.dumps({"mcpServers": servers}))
    # The entries' own keys first, then the schema's types, then the rules between keys.
    assert errors == [
        "mcpServers.remote.type: expected one of http, sse, stdio, streamable-http, "
        "streamable_http, streamablehttp, websocket, ws, got str 'carrier-pigeon'",
        "mcpServers.x.y.comand: unknown key (known here: args, command, cwd, disabledTools, "
        "env, excludeTools, headers, httpUrl, includeTools, options, prompts, resources, "
        "serverUrl, tools, transport, type, url)",
        "mcpServers.files.args[1]: expected a string, got a mapping of 1 key",
        "mcpServers.more.env.TOKEN: expected a string, got a mapping of 1 key",
        "mcpServers.remote.serverUrl: expected an http(s):// or ws(s):// URL, got 'ftp://h/'",
        "mcpServers.also: give a command (stdio) or a url",
        "mcpServers.x.y.httpUrl: expected an http(s):// or ws(s):// URL, got 'h'",
    ]
    assert warnings == [
        "mcpServers.more.command: py is not on PATH here; the server cannot start unless "
        "the proxy's environment has it"
    ]
    # In a message's text too, not only where it starts.
    servers = {
        "x": {"url": "http://h/mcp", "type": "stdio"},
        "y": {"command": sys.executable, "type": "sse"},
    }
    errors, _ = problems_of(tmp_path, "servers.json", json.dumps({"mcpServers": servers}))
    assert errors == [
        "mcpServers.x.type: stdio needs mcpServers.x.command, not a url",
        "mcpServers.y.type: sse needs mcpServers.y.url",
    ]


def test_an_mcp_servers_file_without_a_server_says_so_once(tmp_path: Path) -> None:
    for servers, error in [
        ({"a": {"command": "py", "disabled": True}}, "mcpServers: no server (every entry"),
        ({"a": 5}, "mcpServers.a: expected a mapping, got int 5"),
    ]:
        errors, _ = problems_of(tmp_path, "servers.json", json.dumps({"mcpServers": servers}))
        assert len(errors) == 1 and errors[0].startswith(error), errors


@pytest.mark.parametrize(
    ("text", "where", "is_yaml"),
    [
        ('{"mcpServers": {"a": {"command": "py"},}}', "line 1, column 40", True),
        ("{'mcpServers': {'a': {'command': 'py'}}}", "line 1, column 2", True),
        (
            '{\n  // the files\n  "mcpServers": {"a": {"command": "py"}}\n}',
            "line 2, column 3",
            False,
        ),
        ('{"mcpServers": {"a": {"command": "py", "timeout": NaN}}}', "NaN is not JSON", True),
    ],
)
def test_json_that_hosts_reject_is_rejected(
    tmp_path: Path, text: str, where: str, is_yaml: bool
) -> None:
    errors, _ = problems_of(tmp_path, "servers.json", text)
    (error,) = errors
    assert error.startswith(f"{tmp_path / 'servers.json'}: not valid JSON ("), error
    assert where in error and "hosts read strict JSON" in error
    assert "py" not in error.partition(".json: ")[2]  # the file's text is never quoted
    # The same text in a .yaml file is YAML: only .json is held to JSON's rules.
    errors, _ = problems_of(tmp_path, "servers.yaml", text.replace("py", sys.executable))
    assert bool(errors) is not is_yaml, errors


def test_a_yaml_error_says_where_without_quoting_the_file(tmp_path: Path) -> None:
    errors, _ = problems_of(tmp_path, "c.yaml", "upstream:\n  env: {TOKEN: sk-live-123\n")
    (error,) = errors
    assert "not valid YAML (line 3, column 1" in error and "sk-live" not in error


def test_values_at_secret_keys_are_never_shown(tmp_path: Path) -> None:
    errors, _ = problems_of(
        tmp_path,
        "c.yaml",
        f"upstream: {{command: ['{sys.executable}'], env: {{TOKEN: [sk-live-1]}},"
        " headers: {Authorization: {Bearer: sk-live-2}}}\n"
        "auth: {tokens: [{token: true, principal: p}]}\n",
    )
    assert len(errors) == 3 and not any("sk-live" in e for e in errors), errors
    assert "auth.tokens[0].token: expected a string, got a bool (not shown" in errors[-1]
    # URLs are shown without what may carry a credential: user info, query, fragment.
    errors, _ = problems_of(
        tmp_path,
        "c.yaml",
        "upstream: {url: 'ftp://user:sk-live-3@h/mcp?token=sk-live-4#sk-live-5'}\n"
        "store: {kind: redis, cluster: true, url: 'unix://:sk-live-6@/tmp/r.sock'}\n"
        "auth: {jwt: {jwks_url: 'ftp://idp/jwks?key=sk-live-7'}}\n"
        "streams: {token_secret: sixteen-characters}\n",
    )
    assert errors[0] == "upstream.url: expected an http(s):// or ws(s):// URL, got 'ftp://h/mcp'"
    assert len(errors) == 3 and not any("sk-live" in e for e in errors), errors


def test_check_prints_one_line_per_problem_and_strict_fails_on_warnings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    warned = tmp_path / "warned.yaml"
    warned.write_text("upstream: {command: [no-such-program-for-check-test]}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: {port: -1}\nupstream: {command: [/no/such/server]}\n")
    assert check_main([str(warned)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{warned}: ok\n"
    assert err == (
        f"{warned}: warning: upstream.command[0]: no-such-program-for-check-test is not on "
        "PATH here; the server cannot start unless the proxy's environment has it\n"
    )
    assert check_main(["--strict", str(warned), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[1:] == [
        f"{bad}: listen.port: must be 0..65535, got -1",
        f"{bad}: upstream.command[0]: /no/such/server does not exist",
    ]


def test_an_idle_stop_on_a_server_with_no_process_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "servers.yaml"
    config.write_text(
        "servers:\n"
        "  local: {command: [sh], stop_idle_seconds: 60}\n"
        "  remote: {url: 'http://127.0.0.1:9/mcp', stop_idle_seconds: 5}\n"
    )
    assert check_main([str(config)]) == 0
    _, err = capsys.readouterr()
    assert err == (
        f"{config}: warning: servers.remote.stop_idle_seconds: ignored for a streamable-http "
        "server (only a stdio server has a process of its own to stop)\n"
    )


def test_an_authorization_code_server_not_signed_in_yet_is_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    token_file = tmp_path / "remote.json"
    path.write_text(
        "servers: {remote: {url: 'http://h/mcp', oauth: {grant: authorization_code,"
        f" token_file: '{token_file}'}}}}}}\n"
    )
    problems = check(str(path))
    assert problems.errors == []
    assert problems.warnings == [
        f"servers.remote.oauth: no token file at {token_file} yet: run "
        "`mcp-resume-proxy login remote` before clients come"
    ]
    token_file.write_text("{}")
    assert check(str(path)).warnings == []
