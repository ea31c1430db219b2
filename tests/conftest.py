"""Fixtures shared by every test folder: the kernel backend (or a stated skip) and a namespace leak guard."""
from __future__ import annotations

import os

import pytest


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
