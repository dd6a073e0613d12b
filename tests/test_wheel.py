"""Installed in one line (issue 20): the sdist and the wheel build as for an upload and pass
``twine check``; the wheel installed by ``uv tool install`` and by ``pipx install`` into
fresh directories serves the bundled demo (``mcp-resume-proxy demo``) and one MCP call
goes through it; ``uvx --from WHEEL mcp-resume-proxy`` runs; every ``--help`` and every
``example`` names nothing a wheel install lacks, and ``check`` accepts every example.

The distributions are built once for the module; each install goes to its own temporary
directories (``UV_TOOL_DIR``/``UV_TOOL_BIN_DIR``, ``PIPX_HOME``/``PIPX_BIN_DIR``), from
the package indexes pip is configured with, and runs outside the repository.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from proxy import __version__
from proxy.cli_tools import EXAMPLES
from tests.support import ROOT
from tests.wheel_support import (
    BASE_PYTHON,
    BIN,
    OUTSIDE_THE_PACKAGE,
    build_dist,
    call_the_demo,
    help_texts,
    run,
    user_env,
)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return build_dist(tmp_path_factory.mktemp("build"))


def wheel_of(dist: list[Path]) -> Path:
    (wheel,) = [path for path in dist if path.suffix == ".whl"]
    return wheel


def test_the_sdist_and_the_wheel_pass_twine_check(dist: list[Path]) -> None:
    assert {path.name for path in dist} == {
        f"mcp_resume_proxy-{__version__}.tar.gz",
        f"mcp_resume_proxy-{__version__}-py3-none-any.whl",  # pure Python
    }
    done = subprocess.run(
        [str(BIN / "twine"), "check", "--strict", *map(str, dist)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("PASSED") == 2, done.stdout


async def test_uv_tool_install_serves_the_demo_and_ships_what_help_names(
    dist: list[Path], tmp_path: Path
) -> None:
    tools, bin_dir, home = tmp_path / "tools", tmp_path / "bin", tmp_path / "work"
    home.mkdir()
    env = user_env(bin_dir, UV_TOOL_DIR=str(tools), UV_TOOL_BIN_DIR=str(bin_dir))
    run(
        [str(BIN / "uv"), "tool", "install", "--python", str(BASE_PYTHON), str(wheel_of(dist))],
        env,
        home,
    )
    proxy = bin_dir / "mcp-resume-proxy"
    assert proxy.is_file()
    await call_the_demo([str(proxy), "demo"], env, home)

    helps = help_texts(proxy, env, home)
    for name, text in helps.items():
        for outside in OUTSIDE_THE_PACKAGE:
            assert outside not in text, f"{name} --help names {outside!r}:\n{text}"
    assert "mcp-resume-proxy example local" in helps["main"], helps["main"]
    # Every example is shipped, names nothing outside the package, and passes check with
    # the environment variables it says it reads (a persistent store's token secret, the
    # retrofit's upstream token).
    for name, (file, _) in EXAMPLES.items():
        text = run([str(proxy), "example", name], env, home).stdout
        assert text == (ROOT / "config" / file).read_text()
        for outside in ("config/", ".venv", "scripts/"):
            assert outside not in text, f"example {name} names {outside!r}"
        (home / file).write_text(text)
    secrets = {
        "MCP_RESUME_PROXY_TOKEN_SECRET": "a-test-secret-not-a-real-one",
        "MCP_UPSTREAM_TOKEN": "a-test-token-not-a-real-one",
    }
    files = [file for file, _ in EXAMPLES.values()]
    checked = run([str(proxy), "check", *files], {**env, **secrets}, home)
    for file in files:
        assert f"{file}: ok" in checked.stdout, checked.stdout + checked.stderr


async def test_pipx_install_serves_the_demo(dist: list[Path], tmp_path: Path) -> None:
    home, bin_dir = tmp_path / "work", tmp_path / "bin"
    home.mkdir()
    env = user_env(
        bin_dir,
        PIPX_HOME=str(tmp_path / "pipx"),
        PIPX_BIN_DIR=str(bin_dir),
        PIPX_MAN_DIR=str(tmp_path / "man"),
    )
    # pipx's own installer (pip): with uv beside it pipx would use uv, tested above.
    run(
        [
            str(BIN / "pipx"),
            "install",
            "--backend",
            "pip",
            "--python",
            str(BASE_PYTHON),
            str(wheel_of(dist)),
        ],
        env,
        home,
    )
    await call_the_demo([str(bin_dir / "mcp-resume-proxy"), "demo"], env, home)


async def test_uvx_runs_the_wheel(dist: list[Path], tmp_path: Path) -> None:
    env = user_env(UV_TOOL_DIR=str(tmp_path / "tools"))
    uvx = [str(BIN / "uvx"), "--python", str(BASE_PYTHON), "--from", str(wheel_of(dist))]
    shown = run([*uvx, "mcp-resume-proxy", "--help"], env, tmp_path).stdout
    assert "mcp-resume-proxy demo" in shown and "Last-Event-ID" in shown
    await call_the_demo([*uvx, "mcp-resume-proxy", "demo"], env, tmp_path)
