"""Config files written to hurt (issue 21, secrets and config): each is refused by
``check`` and at start with a config error (exit 2), saying where and what kind of error,
never quoting a secret, never a traceback, without expanding what it asks to expand.

- A broken file (YAML or strict JSON, the main config, an ``mcpServers`` file, the tokens
  file): line and column and the kind of error; PyYAML's quotes of an alias, a tag or a
  character are left out, and a value in or under a secret key is shown by its type.
- A "billion laughs" of nested aliases (a few hundred bytes), 1000-deep nesting, an alias
  inside its own anchor: bounded before anything is expanded.
- A NUL character in any string (``env``, ``args``, ``command``, ``cwd``, a path), an
  ``env`` name with ``=``, a header with a line break: refused with the key path (these
  passed ``check``, then every ``initialize`` got HTTP 500).

Each file is run under a 1 GiB address-space limit, so that a file that would exhaust
memory ends its process quickly (MemoryError, exit 1) instead of the machine's memory.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.config_file import MAX_DEPTH, MAX_VALUES, Unreadable, check_shape, parse_yaml
from tests.support import ROOT

SECRET = "s3cretTOKENvalue-7f41c9a2"
_MEMORY = 1024**3


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (_MEMORY, _MEMORY))


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m proxy ARGS`` (``check FILE`` or ``--config FILE``), memory bounded."""
    return subprocess.run(
        [sys.executable, "-m", "proxy", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        # Port 0: a start that is not refused (a failing test) takes no fixed port.
        env={"PATH": "/usr/bin:/bin", "MCP_RESUME_PROXY_PORT": "0", **(env or {})},
        timeout=120,
        preexec_fn=_limit_memory,
    )


def refused_both_ways(path: Path, *expected: str, env: dict[str, str] | None = None) -> str:
    """Run ``check`` and a start on ``path``: both exit 2 with ``expected`` in the error
    and nothing of :data:`SECRET`; the text ``check`` printed."""
    checked = run("check", str(path), env=env)
    started = run("--config", str(path), env=env)
    for done in (checked, started):
        output = done.stdout + done.stderr
        assert done.returncode == 2, output
        assert "Traceback" not in output, output
        for part in expected:
            assert part in done.stderr, output
        for piece in (SECRET, SECRET[:12], SECRET[-12:]):
            assert piece not in output, output
    assert "mcp-resume-proxy: config error: " in started.stderr
    return checked.stderr


# --- broken files: where and what, never the text -------------------------------------
UP = "upstream: {command: [python, server.py]}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # PyYAML's problem quoted these (the leak, seen by check and at start).
        (UP + f"auth: {{tokens: [{{token: *{SECRET}, principal: a}}]}}\n", "undefined alias"),
        (UP + f"auth: {{tokens: [{{token: !{SECRET} x, principal: a}}]}}\n", "for the tag"),
        (UP + f'streams: {{token_secret: "\\q{SECRET}"}}\n', "unknown escape character"),
        # Its snippet would show the line: each says only where.
        (UP + f"auth:\n  tokens:\n    - {{token: {SECRET}: principal: a}}\n", "(line 4, column"),
        (UP + f'auth: {{tokens: [{{token: "{SECRET}\n', "(line 3, column"),
        (UP + f'streams: {{token_secret: "{SECRET}\x01"}}\n', "(line 2, column 51)"),
        (UP + "listen: {host: 2001-13-01}\n", "a value that cannot be read as its type"),
        # Valid YAML, wrong shape: a token that lost its key, a header line as a string.
        (UP + f"auth: {{tokens: [token {SECRET}]}}\n", "auth.tokens[0]: expected a mapping"),
        (UP + f"auth: {{tokens: {SECRET}}}\n", "auth.tokens: expected a list, got a str"),
        (UP + f"auth: {{tokens: [{{token: x, {SECRET}: p}}]}}\n", "auth.tokens[0]: an unknown"),
        ("upstream: {command: [x], env: A=" + SECRET + "}\n", "upstream.env: expected a mapp"),
        (
            "upstream: {url: 'http://h/mcp', headers: 'Authorization: " + SECRET + "'}\n",
            "upstream.headers: expected a mapping",
        ),
    ],
)
def test_a_broken_config_says_where_never_what_it_holds(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(text)
    refused_both_ways(path, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"mcpServers": {"a": {"command": "x", "env": {"K": "' + SECRET + '" "L"}}}}', "line 1"),
        ('{"mcpServers": {"a": {"command": "x", "env": "K=' + SECRET + '"}}}', "mcpServers.a.env"),
        (
            '{"mcpServers": {"a": {"url": "http://h/mcp", "headers": ["A: ' + SECRET + '"]}}}',
            "mcpServers.a.headers: expected a mapping, got a list",
        ),
    ],
)
def test_a_broken_mcp_servers_file_says_where_never_what_it_holds(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "servers.json"
    path.write_text(text)
    refused_both_ways(path, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"- token {SECRET}\n", "auth.tokens_file[0]: expected a mapping, got a str"),
        (f"- {{token: *{SECRET}, principal: a}}\n", "is not valid YAML (line 1, column 11)"),
        (f'- {{token: "{SECRET}\n', "is not valid YAML (line 2, column 1)"),
    ],
)
def test_a_broken_tokens_file_says_where_never_what_it_holds(
    tmp_path: Path, text: str, expected: str
) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(text)
    path = tmp_path / "proxy.yaml"
    path.write_text(UP + f"auth: {{tokens_file: {tokens}}}\n")
    refused_both_ways(path, expected)


# --- bounded: aliases, depth, cycles ---------------------------------------------------
def alias_bomb(levels: int = 9, width: int = 9, entry: str = "l{i}: ") -> str:
    """Aliases naming aliases: ``width ** levels`` strings once expanded (9**9: 387
    million), in about 500 bytes; each level an ``entry`` (a key, or ``"- "``)."""
    lines = [f"{entry.format(i=0)}&l0 [{', '.join(['x'] * width)}]"]
    for i in range(1, levels):
        lines.append(f"{entry.format(i=i)}&l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_in_a_config_is_refused_before_it_expands(tmp_path: Path) -> None:
    bomb = alias_bomb()
    assert len(bomb) < 600
    path = tmp_path / "proxy.yaml"
    path.write_text(bomb + "upstream: {command: [x], env: {A: *l8}}\n")
    refused_both_ways(path, f"not valid YAML: more than {MAX_VALUES} values")


def test_an_alias_bomb_in_an_mcp_servers_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "servers.yaml"
    path.write_text(alias_bomb() + "mcpServers:\n  a: {command: x, args: *l8}\n")
    refused_both_ways(path, "more than")


def test_an_alias_bomb_in_the_tokens_file_is_refused(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(alias_bomb(entry="- "))
    path = tmp_path / "proxy.yaml"
    path.write_text(UP + f"auth: {{tokens_file: {tokens}}}\n")
    refused_both_ways(path, "auth.tokens_file: ", "more than")


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_1000_deep_nesting_is_a_config_error(tmp_path: Path, suffix: str) -> None:
    deep = '{"a": ' * 1000 + "1" + "}" * 1000
    path = tmp_path / f"proxy{suffix}"
    path.write_text('{"upstream": {"command": ["x"], "env": ' + deep + "}}\n")
    refused_both_ways(path, f"nested deeper than {MAX_DEPTH} levels")


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("upstream: &u {command: [x], env: {A: *u}}\n")
    refused_both_ways(path, "an alias refers to a node that holds it")


def test_anchors_people_use_still_work() -> None:
    """Shared defaults by alias and by merge key: each node counted once per use."""
    text = (
        "defaults: &env {A: '1', B: '2'}\n"
        "base: &base {command: [x], env: *env}\n"
        "servers:\n" + "".join(f"  s{i}: {{<<: *base, cwd: /tmp}}\n" for i in range(50))
    )
    data = parse_yaml(text)
    assert data["servers"]["s49"] == {"command": ["x"], "env": {"A": "1", "B": "2"}, "cwd": "/tmp"}


def test_shape_bounds_count_every_alias_use() -> None:
    shared = list(range(1000))
    check_shape({"a": [shared] * (MAX_VALUES // 1001 - 1)})  # within: fine
    with pytest.raises(Unreadable, match="more than"):
        check_shape({"a": [shared] * (MAX_VALUES // 1000 + 1)})
    nested: list[object] = []
    inner = nested
    for _ in range(MAX_DEPTH):
        inner.append([])
        inner = inner[0]  # type: ignore[assignment]
    with pytest.raises(Unreadable, match="nested deeper"):
        check_shape(nested)
    check_shape(nested[0])  # one level less: fine


# --- what no process or request can carry ----------------------------------------------
@pytest.mark.parametrize(
    ("server", "expected"),
    [
        ({"command": ["python", "-m", "proxy.demo"], "env": {"K": f"{SECRET}\0"}}, "env.K"),
        ({"command": ["python", "-m", f"proxy.demo\0{SECRET}"]}, "command[2]"),
        ({"command": [f"python\0{SECRET}"]}, "command[0]"),
        ({"command": ["python", "-m", "proxy.demo"], "cwd": "/tmp\0"}, "cwd"),
        ({"command": ["python", "-m", "proxy.demo"], "env": {f"K={SECRET}": "v"}}, "env"),
    ],
)
def test_what_a_process_cannot_take_is_refused_with_its_key(
    tmp_path: Path, server: dict[str, object], expected: str
) -> None:
    path = tmp_path / "proxy.json"
    path.write_text(json.dumps({"upstream": server}))
    said = refused_both_ways(path, f"upstream.{expected}: ")
    entry = {"command": server["command"][0], "args": server["command"][1:]}  # type: ignore[index]
    entry.update({k: v for k, v in server.items() if k != "command"})
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"a": entry}}))
    named = {"command[2]": "args[1]", "command[0]": "command"}.get(expected, expected)
    refused_both_ways(servers, f"mcpServers.a.{named}: ")
    assert "NUL" in said or "'='" in said


def test_a_header_that_cannot_be_sent_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("upstream: {url: 'http://h/mcp', headers: {Authorization: '${TOKEN}'}}\n")
    env = {"TOKEN": f"Bearer {SECRET}\r\nX-Injected: 1"}
    refused_both_ways(path, "upstream.headers.Authorization: holds a line break", env=env)
    path.write_text("upstream: {url: 'http://h/mcp', headers: {'Authorization: Bearer': x}}\n")
    refused_both_ways(path, "upstream.headers: a header name is")
