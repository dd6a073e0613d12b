"""Run and read the 0.2.x MCP conformance suite: the 2026-07-28 scenarios and the Tasks extension.

``scripts/install-node-tools.sh`` installs ``@modelcontextprotocol/conformance`` 0.2.0-alpha.12
beside 0.1.16 under the npm alias ``conformance-next`` and writes ``.tools/bin/conformance-next``.

What 2026-07-28 conformance means is the suite's frozen requirement set
(``requirements/2026-07-28.yaml``, ``conformance-next list --requirements 2026-07-28``): 37
scored server scenarios, plus, run but never scored, the 10 ``tasks-*`` scenarios of the extension
``io.modelcontextprotocol/tasks`` and 3 scenarios the suite itself still marks pending. The whole
set runs with::

    .tools/bin/conformance-next server --url URL --requirements 2026-07-28 -o DIR

and one scenario, exactly as that run does it (``--force``: the tasks-* scenarios are off the spec
timeline and would otherwise be skipped at an explicit ``--spec-version``)::

    conformance-next server --url URL --scenario NAME --spec-version 2026-07-28 --force -o DIR

Each scenario is a stateless client (no ``initialize``; every POST carries ``MCP-Protocol-Version:
2026-07-28``, ``Mcp-Method``, ``Mcp-Name`` and the ``io.modelcontextprotocol/*`` ``_meta``) and
writes ``DIR/server-NAME-<timestamp>/checks.json``. What each scenario sends and checks is in the
suite's sources (``src/scenarios/server/stateless.ts``, ``input-required-result.ts``,
``caching.ts``, ``tasks/*.ts`` of modelcontextprotocol/conformance); the tools and the prompt they
call are in ``tests/fixtures/conformance_modern_tools.py``.

Besides its own checks, every scenario validates each message the server sent against the
2026-07-28 JSON schema (check ``wire-schema-valid``; since alpha.12 a ``resultType: "task"`` result
is not validated as the method's core result type).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .suite import (
    ANSI,
    REPO_ROOT,
    RESULT_DIR,
    TOOLS_DIR,
    Check,
    ConformanceToolsError,
    install_once,
    package_version,
)

CLI: Final = TOOLS_DIR / "bin" / "conformance-next"
PACKAGE: Final = TOOLS_DIR / "node_modules" / "conformance-next"
VERSION: Final = "0.2.0-alpha.12"
"""Must match CONFORMANCE_NEXT_VERSION in scripts/install-node-tools.sh."""
REVISION: Final = "2026-07-28"

SCORED: Final[tuple[str, ...]] = (
    "server-stateless",
    "completion-complete",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "server-sse-multiple-streams",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "sep-2164-resource-not-found",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "dns-rebinding-protection",
    "caching",
    "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-request-state",
    "input-required-result-multiple-input-requests",
    "input-required-result-multi-round",
    "input-required-result-missing-input-response",
    "input-required-result-non-tool-request",
    "input-required-result-result-type",
    "input-required-result-unsupported-methods",
    "input-required-result-tampered-state",
    "input-required-result-capability-check",
    "input-required-result-ignore-extra-params",
    "input-required-result-validate-input",
)
"""The server scenarios 2026-07-28 conformance requires, in the suite's order."""
TASKS: Final[tuple[str, ...]] = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)
"""The Tasks extension's scenarios (run by the requirement set, not scored: an extension)."""
PENDING: Final[tuple[str, ...]] = (
    "json-schema-2020-12",
    "http-header-validation",
    "http-custom-header-server-validation",
)
"""Run by the requirement set, not scored: the suite's own reference server cannot pass them."""

RUN_TIMEOUT_S: Final = 120.0
"""One scenario: the suite's own per-scenario limit is 30 s (``--timeout``), plus Node's start."""
SET_TIMEOUT_S: Final = 600.0
"""The whole set (50 scenarios, each a few seconds at most; the suite's own limit is 30 s each)."""

_LIST_ITEM: Final = re.compile(r"^\s+- (\S+)(?: \[(server|client)\])?$")


def _installed_version() -> str | None:
    return package_version(PACKAGE)


def _installed() -> bool:
    return CLI.is_file() and _installed_version() == VERSION


def ensure_cli() -> Path:
    """Return ``.tools/bin/conformance-next``, running the install script first if needed
    (``suite.install_once``: the same lock as ``suite.ensure_conformance_cli``)."""
    install_once(_installed)
    if not _installed():
        raise ConformanceToolsError(
            f"expected @modelcontextprotocol/conformance {VERSION} (conformance-next) in "
            f"{TOOLS_DIR}, found {_installed_version()}"
        )
    return CLI


def _environment() -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"}


@dataclass(frozen=True)
class RequirementSet:
    """What ``conformance-next list --requirements REVISION`` says a server must run."""

    scored: tuple[str, ...]
    not_scored: dict[str, str]
    """Server scenario → the reason it is run but not scored (extension, pending, …)."""


def requirement_set(cli: Path, revision: str = REVISION) -> RequirementSet:
    done = subprocess.run(
        [str(cli), "list", "--requirements", revision],
        cwd=REPO_ROOT,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=True,
    )
    scored: list[str] = []
    not_scored: dict[str, str] = {}
    section, reason = "", ""
    for line in done.stdout.splitlines():
        if line.startswith("Server scenarios"):
            section = "server"
        elif line.startswith("Client scenarios"):
            section = "client"
        elif line.startswith("Run and reported, but never scored"):
            section = "not_scored"
        elif section == "not_scored" and re.match(r"^  \S.*\(\d+\):$", line):
            reason = line.strip().split(" (")[0]
        elif match := _LIST_ITEM.match(line):
            name, leg = match.groups()
            if section == "server":
                scored.append(name)
            elif section == "not_scored" and leg == "server":
                not_scored[name] = reason
    return RequirementSet(tuple(scored), not_scored)


@dataclass(frozen=True)
class ScenarioRun:
    """What one ``conformance-next server --scenario NAME`` run printed and wrote."""

    name: str
    command: tuple[str, ...]
    returncode: int
    output: str
    seconds: float
    checks: tuple[Check, ...]
    in_set: bool = False
    """Read from a run of the whole requirement set (:func:`run_requirement_set`): its
    exit status speaks for every scenario, so this one's verdict is its own checks."""

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.status == "FAILURE")

    @property
    def ok(self) -> bool:
        """Checks were written, none failed, and the CLI agrees (exit 0; for a scenario
        of a whole-set run, its checks alone)."""
        return bool(self.checks) and not self.failures and (self.in_set or self.returncode == 0)

    def report(self, max_error_chars: int = 1500) -> str:
        """The verdict, then every failed check and warning with the suite's message."""
        passed = sum(c.status == "SUCCESS" for c in self.checks)
        verdict = "✓" if self.ok else "✗"
        took = "the whole set's run: " if self.in_set else ""
        lines = [
            f"{verdict} {self.name}: {passed} passed, {len(self.failures)} failed "
            f"({took}{self.seconds:.1f} s, exit {self.returncode})",
            f"  command: {shlex.join(self.command)}",
        ]
        if not self.checks:
            lines.append("  no checks.json was written; the suite's output follows")
            lines.append(strip_ansi(self.output)[-4000:])
        for check in self.failures:
            lines.append(
                f"  FAILURE {check.id}: {_clip(check.error or check.description, max_error_chars)}"
            )
        for check in self.checks:
            if check.status == "WARNING":
                lines.append(
                    f"  WARNING {check.id}: {_clip(check.error or check.description, 300)}"
                )
        return "\n".join(lines)


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def scenario_command(cli: Path, url: str, name: str, output_dir: Path) -> list[str]:
    """One scenario at the 2026-07-28 wire, as ``--requirements 2026-07-28`` runs it."""
    return [
        str(cli),
        "server",
        "--url",
        url,
        "--scenario",
        name,
        "--spec-version",
        REVISION,
        "--force",
        "-o",
        str(output_dir),
    ]


def _read_checks(output_dir: Path, name: str) -> tuple[Check, ...]:
    for path in sorted(output_dir.glob("*/checks.json"), reverse=True):
        match = RESULT_DIR.match(path.parent.name)
        if match is None or match.group(1) != name:
            continue
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return ()
        if isinstance(raw, list):
            return tuple(Check.from_json(item) for item in raw if isinstance(item, dict))
    return ()


def set_command(cli: Path, url: str, output_dir: Path) -> list[str]:
    """Every scenario of the requirement set, in one run (the suite's own command)."""
    return [str(cli), "server", "--url", url, "--requirements", REVISION, "-o", str(output_dir)]


@dataclass(frozen=True)
class SetRun:
    """One ``conformance-next server --requirements 2026-07-28`` run: what it printed, and
    each scenario's checks as that scenario wrote them."""

    command: tuple[str, ...]
    returncode: int
    output: str
    seconds: float
    output_dir: Path

    def scenario(self, name: str) -> ScenarioRun:
        checks = _read_checks(self.output_dir, name)
        return ScenarioRun(
            name, self.command, self.returncode, self.output, self.seconds, checks, in_set=True
        )


def run_requirement_set(cli: Path, url: str, output_dir: Path) -> SetRun:
    """Run the whole set once: one Node start instead of one per scenario (50)."""
    command = set_command(cli, url, output_dir)
    returncode, output, seconds = _run(command, SET_TIMEOUT_S)
    return SetRun(tuple(command), returncode, output, seconds, output_dir)


def _run(command: list[str], timeout: float) -> tuple[int, str, float]:
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
        returncode, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        returncode, output = -1, partial + f"\n[timed out after {timeout:.0f} s]"
    return returncode, output, time.monotonic() - started


def run_scenario(cli: Path, url: str, name: str, output_dir: Path) -> ScenarioRun:
    command = scenario_command(cli, url, name, output_dir)
    returncode, output, seconds = _run(command, RUN_TIMEOUT_S)
    return ScenarioRun(
        name, tuple(command), returncode, output, seconds, _read_checks(output_dir, name)
    )
