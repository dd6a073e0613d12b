"""A config checked against the machine (proxy/config_system.py): a SQLite ``store.path``
this user cannot write is an error for ``check`` and at start (exit 2, naming the key and
the user); an upstream program named by a path that does not exist is an error, a bare
name not on the ``PATH`` the server would get is a warning."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from proxy.config_rules import ConfigError, Problems
from proxy.config_sections import StoreConfig
from proxy.config_system import check_command, check_store_path
from proxy.config_upstream import UpstreamConfig

NOBODY = 65534


def as_unprivileged_user(run: Callable[[], Any]) -> Any:
    """``run()``'s result (JSON), computed in a forked child that is not root: root may
    write anywhere, so a directory's mode only stops another user (uid 65534 here when
    the tests run as root, as in a container; the tests' own user otherwise)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest, no event loop, only run() and the pipe
        status = 1
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            os.write(write_end, json.dumps(run()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child failed"
    return json.loads(data)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory every user can reach (pytest's tmp_path is its user's alone)."""
    path = Path(tempfile.mkdtemp(prefix="config-system-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for child in sorted(path.rglob("*"), reverse=True):
            child.chmod(0o700)
            child.rmdir() if child.is_dir() else child.unlink()
        path.rmdir()


def store_problem(path: str) -> str | None:
    try:
        check_store_path(StoreConfig(kind="sqlite", path=path))
    except ConfigError as exc:
        return str(exc)
    return None


def test_a_sqlite_path_this_user_cannot_write_is_refused(shared_dir: Path) -> None:
    writable, readonly = shared_dir / "writable", shared_dir / "readonly"
    writable.mkdir(mode=0o777)
    writable.chmod(0o777)
    readonly.mkdir(mode=0o555)
    (writable / "other.db").write_bytes(b"")
    (writable / "other.db").chmod(0o444)

    def problems() -> list[str | None]:
        return [
            store_problem(str(writable / "store.db")),
            store_problem(str(readonly / "store.db")),
            store_problem(str(writable / "other.db")),
        ]

    fine, unwritable, read_only_file = as_unprivileged_user(problems)
    assert fine is None  # the control: the same checks pass where the user may write
    assert unwritable is not None and unwritable.startswith(
        f"store.path: {readonly}/store.db: this user (uid "
    )
    assert f"cannot create files in {readonly}" in unwritable
    assert read_only_file is not None
    assert read_only_file.startswith("store.path: this user (uid ")
    assert read_only_file.endswith(f"cannot read and write {writable}/other.db")


def test_a_sqlite_path_in_no_directory_or_naming_a_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store_problem(str(tmp_path / "none" / "x.db")) == (
        f"store.path: {tmp_path}/none/x.db: the directory {tmp_path}/none does not exist"
    )
    assert store_problem(str(tmp_path)) == (
        f"store.path: {tmp_path} is a directory; name a file in it"
    )
    monkeypatch.chdir(tmp_path)
    assert store_problem("data/x.db") == (
        f"store.path: data/x.db (that is {tmp_path}/data/x.db): the directory "
        f"{tmp_path}/data does not exist"
    )
    assert store_problem("x.db") is None
    check_store_path(StoreConfig(kind="memory", path=f"{tmp_path}/none/x.db"))  # not sqlite


def test_the_proxy_refuses_to_start_on_an_unwritable_sqlite_path(shared_dir: Path) -> None:
    readonly = shared_dir / "readonly"
    readonly.mkdir(mode=0o555)
    config = shared_dir / "proxy.yaml"
    config.write_text(
        f"upstream: {{command: ['{sys.executable}', -m, proxy.demo]}}\n"
        f"store: {{kind: sqlite, path: {readonly}/store.db}}\n"
        "streams: {token_secret: a-secret-of-32-characters-------}\n"
    )
    config.chmod(0o644)

    def start() -> tuple[int, str]:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = main(["--config", str(config), "--port", "0"])
        return status, err.getvalue()

    status, err = as_unprivileged_user(start)
    assert status == 2, err  # a config error, not 1 ("cannot listen", "cannot open")
    assert err.startswith(f"mcp-resume-proxy: config error: store.path: {readonly}/store.db: ")
    assert "a-secret" not in err


def command_problems(**upstream: Any) -> tuple[list[str], list[str]]:
    problems = Problems()
    check_command(UpstreamConfig(**upstream), "upstream", problems)
    return problems.errors, problems.warnings


def test_an_upstream_program_that_cannot_be_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    assert command_problems(command=[str(tmp_path / "none.sh")]) == (
        [f"upstream.command[0]: {tmp_path}/none.sh does not exist"],
        [],
    )
    assert command_problems(command=[str(script)]) == (
        [f"upstream.command[0]: {script} is not executable"],
        [],
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    assert command_problems(command=[str(script)]) == ([], [])
    # A relative path is taken from cwd, else from the directory the proxy runs in.
    assert command_problems(command=["./server.sh"], cwd=str(tmp_path)) == ([], [])
    monkeypatch.chdir(tmp_path.parent)
    assert command_problems(command=["./server.sh"]) == (
        [f"upstream.command[0]: server.sh (that is {tmp_path.parent}/server.sh) does not exist"],
        [],
    )
    assert command_problems(command=["x"], cwd=str(tmp_path / "none")) == (
        [],
        [
            f"upstream.cwd: {tmp_path}/none is not a directory here",
            "upstream.command[0]: x is not on PATH here; the server cannot start unless "
            "the proxy's environment has it",
        ],
    )


def test_a_bare_name_is_looked_up_on_the_path_the_server_would_get(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = tmp_path / "my-mcp-server"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    _, warnings = command_problems(command=["my-mcp-server"])
    assert warnings == [
        "upstream.command[0]: my-mcp-server is not on PATH here; the server cannot start "
        "unless the proxy's environment has it"
    ]
    assert command_problems(command=["my-mcp-server"], env={"PATH": str(tmp_path)}) == ([], [])
    monkeypatch.setenv("PATH", str(tmp_path))
    assert command_problems(command=["my-mcp-server"]) == ([], [])
    # Without the proxy's environment, the system's default PATH (os.defpath) is searched.
    assert command_problems(command=["my-mcp-server"], inherit_env=False)[1] != []
    assert command_problems(command=["sh"], inherit_env=False) == ([], [])
