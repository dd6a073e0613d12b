"""The 0.2.x MCP conformance suite judges the proxy's 2026-07-28 façade and its Tasks extension.

The proxy runs in front of the legacy stdio conformance fixture (it speaks only the handshake-era
protocol; ``tests/fixtures/conformance_modern_tools.py`` has what these scenarios call) with the
config this module writes::

    modern: {enabled: true}
    tasks: {mode: after_ms, after_ms: 400}

``after_ms`` below one second because the Tasks scenarios want ``slow_compute {seconds: 1}``,
``failing_job`` (1 s) and ``confirm_delete`` (asks after 1 s) to become tasks while ``greet``
(instant) and ``test_tool_with_task``'s first round (asks at once: MRTR, no task) must not:
``mode: always`` would fail the greet and composition checks. ``CONFORMANCE_MODERN_CONFIG=FILE``
replaces the ``modern``/``tasks`` part (a YAML mapping merged over it).

Every scenario of the suite's 2026-07-28 requirement set runs in one CLI run of the whole set
(``--requirements 2026-07-28``, the suite's own command: ``suite_modern.py``), against one proxy
for the whole module; each scenario's test reads that scenario's ``checks.json``:

- the 37 scored server scenarios and the 10 ``tasks-*`` scenarios must pass (no FAILURE check;
  warnings are printed, not failed);
- the 3 scenarios the suite itself marks pending (not scored there) must pass too: the proxy
  passes them, and a regression should show.

``server-stateless`` also runs alone on a proxy started for it, as a fresh proxy meets it (a
warm spare session must be ready: ``test_server_stateless_passes_on_a_freshly_started_proxy``).

Each scenario's verdict, failures (the suite's own messages) and warnings are printed straight to
the terminal and put in the assertion message; the suite's output is in the test's tmp dir.
``test_requirement_set_is_unchanged`` fails if the installed suite's requirement set is not the
one parametrized here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from .suite import ConformanceToolsError
from .suite_modern import (
    PENDING,
    SCORED,
    TASKS,
    ScenarioRun,
    SetRun,
    ensure_cli,
    requirement_set,
    run_requirement_set,
    run_scenario,
    strip_ansi,
)
from .targets import TargetStartError, http_server_process, proxy_command

MODERN_CONFIG: Final[dict[str, Any]] = {
    "modern": {"enabled": True},
    "tasks": {"mode": "after_ms", "after_ms": 400},
}


def proxy_config() -> dict[str, Any]:
    config = {key: dict(value) for key, value in MODERN_CONFIG.items()}
    override_path = os.environ.get("CONFORMANCE_MODERN_CONFIG")
    if override_path:
        override = yaml.safe_load(Path(override_path).read_text()) or {}
        for section, values in override.items():
            config.setdefault(section, {}).update(values or {})
    return config


@pytest.fixture(scope="session")
def conformance_next_cli() -> Path:
    try:
        return ensure_cli()
    except ConformanceToolsError as exc:
        pytest.fail(f"the 0.2.x conformance suite is not installed: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def modern_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The proxy's MCP URL, for every scenario of this module; always stopped afterwards."""
    with _started_proxy(tmp_path_factory.mktemp("modern-proxy")) as url:
        yield url


@contextlib.contextmanager
def _started_proxy(workdir: Path) -> Iterator[str]:
    config_path = workdir / "proxy.yaml"
    config_path.write_text(yaml.safe_dump(proxy_config(), sort_keys=False))
    try:
        with http_server_process(
            proxy_command("--config", str(config_path)), workdir, "proxy"
        ) as url:
            yield url
    except TargetStartError as exc:
        pytest.fail(f"{exc}\n(log: {workdir / 'proxy.log'})", pytrace=False)


@pytest.fixture(scope="module")
def whole_set(
    conformance_next_cli: Path, modern_proxy: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SetRun, Path]]:
    """The whole requirement set run once against the module's proxy, and where its output
    is kept: each scenario's test reads that scenario's checks."""
    workdir = tmp_path_factory.mktemp("modern-set")
    run = run_requirement_set(conformance_next_cli, modern_proxy, workdir / "results")
    output_path = workdir / "conformance-output.txt"
    output_path.write_text(strip_ansi(run.output))
    yield run, output_path


def _judge(
    name: str,
    cli: Path,
    url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = run_scenario(cli, url, name, tmp_path / "results")
    output_path = tmp_path / "conformance-output.txt"
    output_path.write_text(strip_ansi(run.output))
    _verdict(run, output_path, capsys)


def _verdict(run: ScenarioRun, output_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = f"{run.report()}\n  (suite output: {output_path})"
    with capsys.disabled():
        print(f"\n{report}")
    if not run.ok:
        pytest.fail(report, pytrace=False)


def test_requirement_set_is_unchanged(conformance_next_cli: Path) -> None:
    listed = requirement_set(conformance_next_cli)
    assert listed.scored == SCORED
    assert {name for name, why in listed.not_scored.items() if why == "extension"} == set(TASKS)
    assert {name for name, why in listed.not_scored.items() if why == "pending"} == set(PENDING)


def test_server_stateless_passes_on_a_freshly_started_proxy(
    conformance_next_cli: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its ServerNoLogWithoutLogLevel check gives a call 500 ms, right after a call that stays
    parked on the one pooled session (test_streaming_elicitation asks and is never answered):
    the second call needs another session, and starting one takes longer than that. It passes
    because a spare was started beside the first session (``modern.pool.spare``,
    docs/modern.md §The pool); with ``spare: 0`` it fails on a fresh proxy."""
    workdir = tmp_path / "proxy"
    workdir.mkdir()
    with _started_proxy(workdir) as url:
        _judge("server-stateless", conformance_next_cli, url, tmp_path, capsys)


@pytest.mark.parametrize("scenario", [*SCORED, *TASKS, *PENDING])
def test_scenario_passes(
    scenario: str, whole_set: tuple[SetRun, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every scored 2026-07-28 scenario, every tasks-* one, and the suite's pending ones,
    each judged by its own checks in the whole set's one run."""
    run, output_path = whole_set
    _verdict(run.scenario(scenario), output_path, capsys)


def test_the_whole_set_run_exits_0(whole_set: tuple[SetRun, Path]) -> None:
    """The suite's own verdict on the run: every scored scenario passed."""
    run, output_path = whole_set
    assert run.returncode == 0, f"exit {run.returncode} (suite output: {output_path})"
