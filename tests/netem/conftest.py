"""Fixtures of the netem tests: capabilities and skip reasons (the leak guard is in tests/conftest.py)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def caps():
    from netem.caps import probe

    return probe()


@pytest.fixture
def emulation(caps):
    """Skip unless real namespaces and shaping work here."""
    reason = caps.emulation_missing()
    if reason:
        pytest.skip(reason)
    return caps


@pytest.fixture
def netem_kernel(emulation):
    if not emulation.qdiscs.get("netem"):
        pytest.skip("kernel has no sch_netem")
    return emulation
