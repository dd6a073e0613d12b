"""Install, run and read the MCP conformance suite (npm ``@modelcontextprotocol/conformance``).

The CLI needs Node >= 22; ``scripts/install-node-tools.sh`` puts Node 22 and the pinned suite
into ``.tools/`` and writes ``.tools/bin/conformance``, which runs the CLI on that Node.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
TOOLS_DIR: Final = REPO_ROOT / ".tools"
INSTALL_SCRIPT: Final = REPO_ROOT / "scripts" / "install-node-tools.sh"
CONFORMANCE_CLI: Final = TOOLS_DIR / "bin" / "conformance"
CONFORMANCE_PACKAGE: Final = TOOLS_DIR / "node_modules" / "@modelcontextprotocol" / "conformance"
CONFORMANCE_VERSION: Final = "0.1.16"
"""Must match the version scripts/install-node-tools.sh pins."""

INSTALL_TIMEOUT_S: Final = 900.0
RUN_TIMEOUT_S: Final = 240.0
"""Below the 300 s pytest-timeout of pyproject.toml, so a hung run still gets a readable report."""

ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
_HEADER: Final = re.compile(r"^Running (\S+) suite \((\d+) scenarios\) against (\S+)$")
_SCENARIO_START: Final = re.compile(r"^=== Running scenario: (\S+) ===$")
_SCENARIO_SUMMARY: Final = re.compile(r"^([✓✗]) (\S+): (\d+) passed, (\d+) failed$")
_TOTAL: Final = re.compile(r"^Total: (\d+) passed, (\d+) failed$")
# -o DIR gets one directory per scenario: server-<scenario>-<ISO timestamp with : and . as ->.
RESULT_DIR: Final = re.compile(r"^server-(.+)-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z$")


class ConformanceToolsError(RuntimeError):
    """The Node tools could not be installed or are unusable."""


def package_version(package: Path) -> str | None:
    """The version an installed npm package's package.json names, if any."""
    try:
        manifest = json.loads((package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    version = manifest.get("version")
    return version if isinstance(version, str) else None


def _installed_version() -> str | None:
    return package_version(CONFORMANCE_PACKAGE)


def install_once(installed: Callable[[], bool]) -> None:
    """Run the install script unless ``installed()`` already holds.

    Safe to call from parallel test processes: installs are serialised by a file lock
    (the same lock for every suite version the script installs).
    """
    if installed():
        return
    TOOLS_DIR.mkdir(exist_ok=True)
    with (TOOLS_DIR / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed():
            return
        try:
            done = subprocess.run(
                ["bash", str(INSTALL_SCRIPT)],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConformanceToolsError(f"{INSTALL_SCRIPT} could not run: {exc}") from exc
        if done.returncode != 0:
            raise ConformanceToolsError(
                f"{INSTALL_SCRIPT} exited {done.returncode}\n"
                f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
            )


def _installed() -> bool:
    return CONFORMANCE_CLI.is_file() and _installed_version() == CONFORMANCE_VERSION


def ensure_conformance_cli() -> Path:
    """Return the conformance CLI wrapper, running the install script first if needed."""
    install_once(_installed)
    if not _installed():
        raise ConformanceToolsError(
            f"expected @modelcontextprotocol/conformance {CONFORMANCE_VERSION} in {TOOLS_DIR}, "
            f"found {_installed_version()}"
        )
    return CONFORMANCE_CLI


@dataclass(frozen=True)
class Check:
    """One check of a scenario, as the suite writes it to ``checks.json``."""

    id: str
    status: str
    description: str
    error: str | None

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Check:
        return cls(
            id=str(raw.get("id", "?")),
            status=str(raw.get("status", "?")),
            description=str(raw.get("description", "")),
            error=raw.get("errorMessage"),
        )


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    passed: int
    failed: int
    checks: tuple[Check, ...] = ()

    @property
    def ok(self) -> bool:
        return self.failed == 0 and not any(check.status == "FAILURE" for check in self.checks)

    @property
    def warnings(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if check.status == "WARNING")


@dataclass(frozen=True)
class ConformanceRun:
    """What one ``conformance server`` run printed and wrote."""

    command: tuple[str, ...]
    returncode: int
    output: str
    seconds: float
    announced: tuple[str, ...]
    """The scenarios the CLI said it would run, in order."""
    announced_count: int | None
    results: dict[str, ScenarioResult] = field(default_factory=dict)
    total_line: str | None = None

    @property
    def failed_scenarios(self) -> list[str]:
        return [
            name for name in self.announced if name not in self.results or not self.results[name].ok
        ]

    @property
    def ok(self) -> bool:
        return (
            self.returncode == 0
            and self.total_line is not None
            and bool(self.announced)
            and self.announced_count == len(self.announced)
            and not self.failed_scenarios
        )

    def report(self, target: str) -> str:
        """A human summary: the suite's total line, then what failed or warned, and why."""
        lines = [
            f"MCP conformance {CONFORMANCE_VERSION} against {target}: "
            f"{self.total_line or 'no summary line'} "
            f"({len(self.announced)} scenarios, {self.seconds:.1f} s, exit {self.returncode})",
            f"command: {shlex.join(self.command)}",
        ]
        if self.announced_count is not None and self.announced_count != len(self.announced):
            lines.append(
                f"the suite announced {self.announced_count} scenarios but ran "
                f"{len(self.announced)}"
            )
        for name in self.announced:
            result = self.results.get(name)
            if result is None:
                lines.append(f"  ✗ {name}: no result")
                continue
            if not result.ok:
                lines.append(f"  ✗ {name}: {result.passed} passed, {result.failed} failed")
                for check in result.checks:
                    if check.status == "FAILURE":
                        lines.append(
                            f"      FAILURE {check.id}: {check.error or check.description}"
                        )
            for check in result.warnings:
                lines.append(f"  ! {name} WARNING {check.id}: {check.error or check.description}")
        return "\n".join(lines)


def _read_checks(output_dir: Path) -> dict[str, tuple[Check, ...]]:
    checks: dict[str, tuple[Check, ...]] = {}
    if not output_dir.is_dir():
        return checks
    for path in sorted(output_dir.glob("*/checks.json")):
        match = RESULT_DIR.match(path.parent.name)
        if match is None:
            continue
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(raw, list):
            checks[match.group(1)] = tuple(Check.from_json(item) for item in raw)
    return checks


def parse_run(
    command: Sequence[str], returncode: int, output: str, seconds: float, output_dir: Path
) -> ConformanceRun:
    """Read the CLI's console output (summary lines) and its ``-o`` directory (checks)."""
    announced: list[str] = []
    announced_count: int | None = None
    summaries: dict[str, tuple[int, int]] = {}
    total_line: str | None = None
    for raw_line in output.splitlines():
        line = ANSI.sub("", raw_line).strip()
        if match := _HEADER.match(line):
            announced_count = int(match.group(2))
        elif match := _SCENARIO_START.match(line):
            announced.append(match.group(1))
        elif match := _SCENARIO_SUMMARY.match(line):
            summaries[match.group(2)] = (int(match.group(3)), int(match.group(4)))
        elif _TOTAL.match(line):
            total_line = line
    checks = _read_checks(output_dir)
    results = {
        name: ScenarioResult(name, passed, failed, checks.get(name, ()))
        for name, (passed, failed) in summaries.items()
    }
    return ConformanceRun(
        command=tuple(command),
        returncode=returncode,
        output=output,
        seconds=seconds,
        announced=tuple(announced),
        announced_count=announced_count,
        results=results,
        total_line=total_line,
    )


def conformance_command(cli: Path, url: str, output_dir: Path) -> list[str]:
    """The command that runs every active server scenario against ``url``."""
    return [str(cli), "server", "--url", url, "--suite", "active", "-o", str(output_dir)]


def run_conformance(cli: Path, url: str, output_dir: Path) -> ConformanceRun:
    command = conformance_command(cli, url, output_dir)
    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0"}
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        returncode, output = done.returncode, done.stdout
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        returncode, output = -1, partial + f"\n[timed out after {RUN_TIMEOUT_S:.0f} s]"
    return parse_run(command, returncode, output, time.monotonic() - started, output_dir)
