"""What the callgrind scripts share (bench/instructions.py, bench/replay_ir.py): the
proxy's launch line, reading a dump's total, driving a running callgrind, and ending
what a script started."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
from pathlib import Path


def proxy_code(src: str) -> str:
    """``python -c`` code running the proxy of the tree at ``src``."""
    return (
        f"import sys; sys.path.insert(0, {src!r}); sys.argv[0] = 'mcp-resume-proxy'; "
        "from proxy.cli import main; sys.exit(main())"
    )


def ir(path: str) -> int:
    """The total instructions of one callgrind dump."""
    for line in Path(path).read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    return 0


def control(*args: str) -> None:
    """``callgrind_control ARGS`` (dump, instrumentation on/off) for a running process."""
    subprocess.run(["callgrind_control", *args], capture_output=True)


def end(procs: list[subprocess.Popen[bytes]], dumps: str) -> None:
    """Stop each process group (SIGTERM, SIGKILL after 20 s) and remove the dumps
    named ``dumps*``."""
    for proc in procs:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    for path in glob.glob(dumps + "*"):
        os.unlink(path)
