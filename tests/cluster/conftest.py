"""Fixtures of the cluster tests: skip reasons for emulated tests and a namespace leak guard."""
from __future__ import annotations

import pytest


def emulation_skip_reason() -> str | None:
    """Why real namespaces and kernel shaping cannot be used here (None when they can)."""
    from netem.caps import probe

    missing = probe().emulation_missing()
    return f"emulated: {missing}" if missing else None


@pytest.fixture(scope="session")
def kernel_backend() -> str:
    """'netem' or 'tc' (what launch(backend='auto') builds); skips when neither works."""
    from netem.caps import probe

    reason = emulation_skip_reason()
    if reason:
        pytest.skip(reason)
    return probe().best_backend()


@pytest.fixture(autouse=True)
def no_leaks():
    """Every test leaves no namespace owned by this process behind."""
    yield
    from cluster_helpers import our_namespaces

    mine = our_namespaces()
    assert not mine, f"test leaked namespaces: {mine}"
