"""``log.format: console`` prints lines a person reads (proxy/logs.py): ``TIME LEVEL EVENT
key=value ...``, nested mappings as dotted keys, never a Python dict, and no value able to
break its line."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import structlog

from proxy.logs import configure_logging, render_console


@pytest.fixture
def console(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    """Console logs to the captured stderr for one test; the earlier config after it."""
    saved = structlog.get_config()
    try:
        yield capsys
    finally:
        structlog.configure(**saved)


def test_a_console_line_is_key_value_with_nested_mappings_flattened(
    console: pytest.CaptureFixture[str],
) -> None:
    configure_logging("console", "info")  # in the test: stderr is the captured one now
    log = structlog.get_logger("test")
    log.info(
        "proxy_listening",
        url="http://127.0.0.1:8808/mcp",
        servers={"a": "http://h/servers/a/mcp", "b": {"deep": 1}},
        upstream="python3 -m proxy.demo",
        command=["python3", "-m", "proxy.demo"],
        error={"code": -32000, "data": {"reason": "proxy_shutdown"}},
        none=None,
        flag=True,
    )
    log.debug("hidden")  # below the level
    (line,) = console.readouterr().err.splitlines()
    time, level, event, pairs = line.split(None, 3)
    assert time.endswith("Z") and level == "info" and event == "proxy_listening"
    assert pairs == (
        "url=http://127.0.0.1:8808/mcp servers.a=http://h/servers/a/mcp servers.b.deep=1 "
        'upstream="python3 -m proxy.demo" command=python3,-m,proxy.demo error.code=-32000 '
        "error.data.reason=proxy_shutdown none=null flag=true"
    )
    assert "{" not in line and "'" not in line


def test_a_value_cannot_break_its_line_or_pass_for_another_key() -> None:
    line = render_console(
        None, "info", {"event": "upstream_stderr", "line": "a\nb=c \x1b[31m", "empty": ""}
    )
    assert "\n" not in line and "\x1b" not in line
    quoted = line.split("line=", 1)[1].rsplit(" empty=", 1)[0]
    assert json.loads(quoted) == "a\nb=c \x1b[31m"
    assert line.endswith('empty=""')


def test_an_exception_follows_its_line(console: pytest.CaptureFixture[str]) -> None:
    configure_logging("console", "info")
    try:
        raise ValueError("boom")
    except ValueError:
        structlog.get_logger("test").exception("task_failed", task="reader")
    first, *rest = console.readouterr().err.splitlines()
    assert first.split(" ", 1)[1] == "error   task_failed task=reader"
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: boom"
