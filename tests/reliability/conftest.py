"""Fixtures of the reliability tests: the kernel backend (or a stated skip) and leak guards.

Every test must leave no namespace owned by this process and no role process of its own
runs behind (other helpers' runs share this machine: only our own are checked).
"""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def kernel_backend() -> str:
    """'netem' or 'tc' (what net.backend=auto builds here); skips with the reason otherwise."""
    from netem.caps import probe
    from reliability_helpers import emulation_skip_reason

    reason = emulation_skip_reason()
    if reason:
        pytest.skip(reason)
    return probe().best_backend()


@pytest.fixture
def out_dir(tmp_path):
    """A results folder of this test only (out_dir=...); role processes of its runs must be gone after."""
    yield tmp_path / "runs"
    from reliability_helpers import leftover_processes

    left = leftover_processes(tmp_path)
    assert not left, f"test left processes of its runs behind: {left}"


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test leaves no namespace owned by this process behind."""
    yield
    from reliability_helpers import our_namespaces

    mine = our_namespaces()
    assert not mine, f"test leaked namespaces: {mine}"
