"""Helpers of the netem tests: who owns which namespace, running small programs in namespaces."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def ours_of(pid: int | str) -> list[str]:
    from netem.names import list_ours

    return sorted(n.name for n in list_ours() if n.owner == str(pid))


def run_in(prefix: list[str], code: str, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """Run a short Python program inside a namespace (prefix from StarTopology.exec_prefix)."""
    return subprocess.run(prefix + [sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=timeout)


def spawn(code: str) -> subprocess.Popen:
    """Start a Python program (in our namespace) that can import netem; stdout is a text pipe."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
