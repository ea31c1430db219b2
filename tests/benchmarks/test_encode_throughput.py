"""Encode throughput of spar beside powersgd and top-k at the same budget, at three shape sets.

    .venv/bin/python -m pytest tests/benchmarks/test_encode_throughput.py --benchmark-enable -n 0 -s

Shape sets (LoRA r=64 on q,k,v,o,gate,up,down of a Llama-style model):
  tiny   hidden 128, MLP 256, 2 layers: real gradients (harness.commands.compress_bench.gradients.lora_gradients)
  small  hidden 256, MLP 768, 4 layers: real gradients
  wide   hidden 1024, MLP 2048, 2 layers: SYNTHETIC gradients (LLM proportions, r/d = 1/16;
         branch wide's preset was not there): each matrix a rank-8 signal with decaying
         singular values plus 1% Gaussian noise, seeded. The spectrum decides spar's ranks,
         so the figure at this set is labelled synthetic.
Throughput: MB/s of fp32 gradient encoded (4 bytes x elements / median encode CPU seconds of
the process, i.e. per core), one torch thread (the machine is shared: CPU time, unlike wall
time, does not count the time other processes held the core),
encode only (the error-feedback decode is the same for every compressor). Budget 1.6% of the
adapter's bf16 bytes, header included. extra_info: MB/s, err_1 (||g - C(g)|| / ||g||, single
step) and bytes, so "same budget, same error" can be checked beside the speed. Nothing about
speed is asserted; each case asserts the budget holds.
"""
from __future__ import annotations

import functools
import statistics
import time

import pytest
import torch

from harness.compress import Payload, build
from harness.commands.compress_bench import gradients as bench_gradients

BUDGET = 0.016
COMPRESSORS = ("spar", "powersgd", "topk")
SHAPES = {"tiny": dict(hidden=128, layers=2), "small": dict(hidden=256, layers=4)}
WIDE = dict(hidden=1024, mlp=2048, layers=2, rank=64)


def wide_gradients(steps: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """Synthetic LoRA gradients at LLM proportions (see module docstring)."""
    d, f, r = WIDE["hidden"], WIDE["mlp"], WIDE["rank"]
    dims = {"q_proj": (d, d), "k_proj": (d, d), "v_proj": (d, d), "o_proj": (d, d),
            "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        grads = {}
        for layer in range(WIDE["layers"]):
            for proj, (d_in, d_out) in dims.items():
                for side, (m, n) in (("lora_A", (r, d_in)), ("lora_B", (d_out, r))):
                    sig = torch.logspace(0, -2, 8)
                    mat = (torch.randn(m, 8, generator=g) * sig) @ torch.randn(8, n, generator=g) / n ** 0.5
                    mat += 0.01 * sig[0] * torch.randn(m, n, generator=g) / n ** 0.5
                    grads[f"layers.{layer}.{proj}.{side}.weight"] = mat
        out.append(grads)
    return out


@functools.lru_cache(maxsize=3)
def gradients(shape_set: str, steps: int) -> list[dict[str, torch.Tensor]]:
    """The gradients of one shape set (cached: every compressor gets the same ones; do not modify)."""
    if shape_set == "wide":
        return wide_gradients(steps)
    return bench_gradients.lora_gradients(steps=steps, warmup=3, **SHAPES[shape_set])


def throughput(name: str, grads: list[dict[str, torch.Tensor]], repeats: int = 3) -> dict:
    """MB/s of fp32 gradient (median encode), mean err_1 and bytes of ``name`` at BUDGET."""
    comp = build(name, budget=BUDGET)
    comp.encode(grads[0], 0)                                   # warm up (allocator, LAPACK)
    mb = 4 * sum(t.numel() for t in grads[0].values()) / 1e6
    seconds, errors, sizes = [], [], []
    for step, g in enumerate(grads):
        for _ in range(repeats):
            t0 = time.process_time()
            payload = comp.encode(g, step + 1)
            seconds.append(time.process_time() - t0)
        decoded = comp.decode(Payload.from_bytes(payload.to_bytes()))
        num = sum(float((g[n] - decoded[n]).square().sum()) for n in g)
        den = sum(float(t.square().sum()) for t in g.values())
        errors.append((num / den) ** 0.5)
        sizes.append(payload.nbytes)
        assert payload.nbytes <= payload.info["budget_bytes"]
    return {"mb_per_s": round(mb / statistics.median(seconds), 2), "encode_ms": round(1e3 * statistics.median(seconds), 3),
            "err_1": round(statistics.mean(errors), 5), "bytes": max(sizes), "gradient_mb": round(mb, 3)}


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("shape_set", ["tiny", "small", "wide"])
@pytest.mark.parametrize("name", COMPRESSORS)
def test_encode_throughput(benchmark, one_thread, shape_set, name):
    enabled = not benchmark.disabled
    grads = gradients(shape_set, steps=5 if enabled else 1)
    benchmark.group = f"encode throughput {shape_set} ({BUDGET:.1%})"
    figures = benchmark.pedantic(throughput, args=(name, grads, 3 if enabled else 1), rounds=1, iterations=1)
    benchmark.extra_info.update(shape_set=shape_set, synthetic=shape_set == "wide", **figures)
    if enabled:
        print(f"\n{shape_set:>5} {name:>8}: {figures['mb_per_s']:8.1f} MB/s  err_1 {figures['err_1']:.4f}  "
              f"bytes {figures['bytes']}")
