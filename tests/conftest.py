"""Fixtures shared by every test folder: the kernel backend (or a stated skip), a namespace leak
guard, and the command line run while watching for the namespaces it creates."""
from __future__ import annotations

import os
import subprocess
from typing import Callable

import pytest


def pytest_configure(config):
    """One intra-op thread in each test process. `make test` runs two pytest-xdist workers on CI's 2
    cores; at torch's default (a thread per core in each) they oversubscribe the cores twice over and
    OpenMP's waiting threads spin (measured: the pure tiers of tests/compress and tests/onpolicy used
    40 s of CPU at the default, 26 s at one thread, same tests passing). The role processes the tests
    start are not affected: each sets its own count (harness.cluster.launch.ROLE_THREADS)."""
    import torch

    torch.set_num_threads(1)


def emulation_skip_reason() -> str | None:
    """Why real namespaces and kernel shaping cannot be used here (None when they can)."""
    from netem.caps import probe

    missing = probe().emulation_missing()
    return f"emulated: {missing}" if missing else None


@pytest.fixture(scope="session")
def kernel_backend() -> str:
    """'netem' or 'tc' (what net.backend=auto builds here); skips with the reason otherwise."""
    from netem.caps import probe

    reason = emulation_skip_reason()
    if reason:
        pytest.skip(reason)
    return probe().best_backend()


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test leaves no namespace owned by this process behind."""
    yield
    from netem.names import list_ours

    mine = [n.name for n in list_ours() if n.owner == str(os.getpid())]
    assert not mine, f"test leaked namespaces: {mine}"


@pytest.fixture
def harness_cli() -> Callable[..., tuple[int, str, str, set[str]]]:
    """``run(*args)``: ``python -m harness *args`` to the end (forked warm: tests/warm_cli.py), watching
    every 0.2 s (and once after it exits) for network namespaces its process owns; (exit status, stdout,
    stderr, namespaces seen)."""
    import warm_cli
    from netem.names import list_ours

    def run(*args: str) -> tuple[int, str, str, set[str]]:
        proc = warm_cli.popen("harness", args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: set[str] = set()
        while proc.poll() is None:
            seen |= {n.name for n in list_ours() if n.owner == str(proc.pid)}
            try:
                proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
        out, err = proc.communicate()
        seen |= {n.name for n in list_ours() if n.owner == str(proc.pid)}
        return proc.returncode, out, err, seen
    return run
