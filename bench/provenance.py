"""Which code and which machine a run measured: the lines the runner prints under its tables.

:func:`code_version` names the commit and the ``proxy/`` tree measured (and whether
``proxy/`` had uncommitted changes), :func:`machine_line` the date, CPU, load and command;
:func:`archive_proxy` makes the fixed copy of ``proxy/`` that ``run.py --proxy-at COMMIT``
runs, so that commits landing during a long run do not change what is measured. Only
read-only git commands (``rev-parse``, ``status``, ``archive``).
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import contenders as C
from contenders import ROOT


def machine_line(argv: list[str]) -> str:
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{now} · {code_version()} · nproc {os.cpu_count()} · {model} · "
        f"load average at the end {load} · Python {platform.python_version()} · "
        f"`{shlex.join(argv)}`"
    )


FROZEN_AT: list[str] = []  # the --proxy-at commit, once the copy is made


def archive_proxy(commit: str, into: Path, *, frozen: bool = True) -> str:
    """``proxy/`` as of ``commit``, unpacked into ``into`` (``git archive``: read-only); the
    full commit. ``frozen``: the copy the whole run measures (``--proxy-at``), else a
    baseline run beside it."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "proxy"], cwd=ROOT, capture_output=True
    )
    resolved = subprocess.run(
        ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if archive.returncode != 0:
        sys.exit(f"git archive {commit}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    if frozen:
        FROZEN_AT.append(resolved)  # HEAD may move during the run; this may not
    return resolved


def code_version() -> str:
    """The commit measured, the tree of ``proxy/`` in it, and whether ``proxy/`` had
    uncommitted changes (read-only git queries). Commits may land during a long run: the
    runner compares the ``proxy/`` tree at the start and at the end."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    frozen = os.environ.get(C.PROXY_SRC_ENV)
    rev = FROZEN_AT[0] if frozen and FROZEN_AT else "HEAD"
    try:
        head = git("rev-parse", "--short", rev)
        tree = git("rev-parse", "--short", f"{rev}:proxy")
        dirty = "" if frozen else git("status", "--porcelain", "--", "proxy")
    except OSError:
        return "commit unknown"
    more = " + uncommitted proxy/ changes" if dirty else ""
    how = ", a copy: --proxy-at" if frozen else ""
    return f"commit {head or 'unknown'} (proxy/ tree {tree or 'unknown'}{more}{how})"
