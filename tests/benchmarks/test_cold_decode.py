"""Benchmark: Spar's decode of a tiny-model payload repeated (hot) and right after a 120 ms sleep
(cold), one process, one thread. A rollout worker sleeps about that long in every update while the
learner learns, so its decode + step runs on a cold core (docs/onpolicy.md, "The critical path,
third pass").

    .venv/bin/python -m pytest tests/benchmarks/test_cold_decode.py --benchmark-enable -n 0

With benchmarks disabled (the default) each case runs once.
"""
from __future__ import annotations

import time

import pytest
import torch

from harness.commands.compress_bench import gradients as bench_gradients
from harness.compress import Payload, build


@pytest.fixture(scope="module")
def payload():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        grads = bench_gradients.lora_gradients(steps=2, warmup=1, model="tiny")[0]
        comp = build("spar", seed=0, budget=0.016)
        yield comp, comp.encode(grads, 0).to_bytes()
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("core", ["hot", "after_120ms_sleep"])
def test_spar_decode(benchmark, payload, core):
    comp, data = payload
    decode = lambda: comp.decode(Payload.from_bytes(data))       # noqa: E731
    decode()
    if core == "hot":
        out = benchmark(decode)
    else:
        out = benchmark.pedantic(decode, setup=lambda: time.sleep(0.12), rounds=20, iterations=1)
    assert len(out) == 28
