"""DeMo's compression (harness/compress/demo.py): an orthonormal DCT per chunk, top-k per chunk."""
from __future__ import annotations

import pytest
import torch

from compress_inputs import lora_like, rel_error
from harness.compress import CompressorError, ErrorFeedback, Payload, build
from harness.compress.demo import dct_matrix, tiles


def test_the_dct_is_orthonormal_so_all_coefficients_reconstruct_the_input():
    for n in (1, 7, 16, 64):
        d = dct_matrix(n).double()
        assert torch.allclose(d @ d.T, torch.eye(n, dtype=torch.float64), atol=1e-6)
    grads = lora_like()
    comp = build("demo", dtype="fp32", topk=4096)          # more than any chunk holds: every coefficient
    out = comp.decode(Payload.from_bytes(comp.encode(grads).to_bytes()))
    assert all(torch.allclose(out[n], grads[n], atol=1e-6, rtol=1e-5) for n in grads)


def test_chunks_follow_demo_rule_and_cover_every_shape():
    """Tiles are the largest divisors <= chunk of each side (DeMo's _get_smaller_split)."""
    for shape in [(576, 16), (16, 576), (1536, 64), (577, 3), (48,), (2, 3, 5)]:
        rows, cols, h, w = tiles(shape, 64)
        assert rows * cols == torch.Size(shape).numel() and rows % h == 0 and cols % w == 0
        assert h <= max(64, 1) and w <= 64
        assert not any(rows % d == 0 for d in range(h + 1, min(rows, 64) + 1))
        assert not any(cols % d == 0 for d in range(w + 1, min(cols, 64) + 1))


def test_a_smooth_gradient_compresses_far_better_than_noise_at_equal_bytes():
    """What the DCT buys: energy of a smooth signal sits in few low-frequency coefficients."""
    x = torch.linspace(0, 1, 128 * 64).reshape(128, 64)
    smooth, noise = {"w": torch.sin(6 * x) + x ** 2}, {"w": torch.randn(128, 64, generator=torch.Generator().manual_seed(0))}
    comp = build("demo", budget=0.1)
    assert rel_error(smooth, comp.decode(comp.encode(smooth))) < 0.1 < rel_error(noise, comp.decode(comp.encode(noise)))


def test_more_coefficients_per_chunk_reconstruct_better_and_the_residual_is_kept():
    grads = lora_like()
    errors = [rel_error(grads, build("demo", topk=k).decode(build("demo", topk=k).encode(grads))) for k in (2, 8, 32)]
    assert errors == sorted(errors, reverse=True) and errors[-1] < errors[0]
    fed = build("demo", budget=0.15, error_feedback=True)
    assert isinstance(fed, ErrorFeedback)
    decoded = fed.decode(fed.encode(grads))
    assert all(torch.allclose(decoded[n] + fed.residual[n], grads[n], atol=1e-6) for n in grads)


def test_a_budget_below_one_coefficient_per_chunk_or_a_fixed_topk_fails_with_the_key():
    grads = lora_like()
    with pytest.raises(CompressorError, match="compressor.budget: .* cannot hold one DCT coefficient per chunk"):
        build("demo", budget_bytes=480).encode(grads)
    with pytest.raises(CompressorError, match="cannot hold topk=64 coefficients per chunk"):
        build("demo", topk=64, budget=0.06).encode(grads)
    for bad, key in [({"chunk": 0}, "compressor.options.chunk: 0"), ({"topk": 0}, "compressor.options.topk: 0")]:
        with pytest.raises(CompressorError, match=key):
            build("demo", budget=0.1, **bad)
