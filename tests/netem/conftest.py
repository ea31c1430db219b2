"""Fixtures of the netem tests: skip reasons and a guard that nothing of ours leaks."""
from __future__ import annotations

import os

import pytest


def _emulation_skip_reason() -> str | None:
    from netem.caps import probe

    return probe().emulation_missing()


@pytest.fixture(scope="session")
def caps():
    from netem.caps import probe

    return probe()


@pytest.fixture
def emulation(caps):
    """Skip unless real namespaces and shaping work here."""
    reason = _emulation_skip_reason()
    if reason:
        pytest.skip(reason)
    return caps


@pytest.fixture
def netem_kernel(emulation):
    if not emulation.qdiscs.get("netem"):
        pytest.skip("kernel has no sch_netem")
    return emulation


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test leaves no namespace owned by this process behind."""
    yield
    from netem.names import list_ours

    mine = [n.name for n in list_ours() if n.owner == str(os.getpid())]
    assert not mine, f"test leaked namespaces: {mine}"
