"""Fixtures of the reliability tests: a results folder whose runs must leave no process behind.

(The kernel backend and the namespace leak guard are in tests/conftest.py.) Other runs may
share this machine: only our own are checked.
"""
from __future__ import annotations

import pytest


@pytest.fixture
def out_dir(tmp_path):
    """A results folder of this test only (out_dir=...); role processes of its runs must be gone after."""
    yield tmp_path / "runs"
    from reliability_helpers import leftover_processes

    left = leftover_processes(tmp_path)
    assert not left, f"test left processes of its runs behind: {left}"
