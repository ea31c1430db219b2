"""Fixtures of the cluster tests: skip reasons for emulated tests and a namespace leak guard."""
from __future__ import annotations

import pytest


def emulation_skip_reason() -> str | None:
    """Why real namespaces and kernel shaping cannot be used here (None when they can)."""
    from netem.caps import probe

    found = probe()
    if not found.root:
        return "emulated: needs root or CAP_NET_ADMIN to create network namespaces"
    if not found.netns:
        return f"emulated: network namespaces unavailable here ({found.notes.get('netns', 'probe failed')})"
    if not (found.qdiscs.get("tbf") or found.qdiscs.get("netem")):
        return "emulated: kernel has neither sch_tbf nor sch_netem"
    return None


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
