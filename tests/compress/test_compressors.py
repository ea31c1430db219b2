"""Every compressor: budget adherence, determinism, thread-independent decode, clear errors."""
from __future__ import annotations

import pytest
import torch

from compress_inputs import BUDGETS, LOSSY, lora_like, options, rel_error
from harness.compress import NAMES, CompressorError, Payload, build


@pytest.mark.parametrize("name", LOSSY)
def test_every_lossy_compressor_fits_its_budget_and_says_how_much_it_used(name, grads):
    dense = 2 * sum(t.numel() for t in grads.values())
    errors = []
    for budget in BUDGETS[name]:
        payload = build(name, budget=budget).encode(grads)
        limit = int(budget * dense)
        assert payload.info["budget_bytes"] == limit
        assert payload.info["used_bytes"] == payload.nbytes <= limit
        assert payload.nbytes > 0.5 * limit, f"{name} left most of its budget unused"
        errors.append(rel_error(grads, build(name, budget=budget).decode(payload)))
    assert errors == sorted(errors, reverse=True), f"{name}: more bytes should not reconstruct worse: {errors}"
    assert errors[-1] < 1


@pytest.mark.parametrize("name", LOSSY)
def test_absolute_budget_wins_over_fraction(name, grads):
    payload = build(name, budget=0.99, budget_bytes=3000).encode(grads)
    assert payload.info["budget_bytes"] == 3000 and payload.nbytes <= 3000


def test_identity_fp32_is_bit_exact_and_bf16_rounds(grads):
    out = build("identity", dtype="fp32").decode(build("identity", dtype="fp32").encode(grads))
    assert all(torch.equal(out[n], grads[n]) for n in grads)
    out = build("identity").decode(build("identity").encode(grads))
    assert all(torch.equal(out[n], grads[n].bfloat16().float()) for n in grads)
    bf16 = {n: t.bfloat16() for n, t in grads.items()}      # bf16 input, fp32 wire: exact as well
    out = build("identity", dtype="fp32").decode(build("identity", dtype="fp32").encode(bf16))
    assert all(torch.equal(out[n], bf16[n].float()) for n in grads)


@pytest.mark.parametrize("name", NAMES)
def test_same_inputs_seed_and_step_give_same_bytes(name, grads):
    a = build(name, seed=3, **options(name)).encode(grads, step=4).to_bytes()
    b = build(name, seed=3, **options(name)).encode(grads, step=4).to_bytes()
    assert a == b


@pytest.mark.parametrize("name", ["randk", "quant"])
def test_randomness_depends_on_seed_and_step(name, grads):
    opts = dict(options(name), **({"stochastic": True} if name == "quant" else {}))
    base = build(name, seed=1, **opts).encode(grads, step=1).to_bytes()
    assert build(name, seed=2, **opts).encode(grads, step=1).to_bytes() != base
    assert build(name, seed=1, **opts).encode(grads, step=2).to_bytes() != base


@pytest.mark.parametrize("name", NAMES)
def test_decode_gives_identical_bits_with_one_or_two_threads(name):
    grads = lora_like(seed=1, r=16, d=96, ffn=160, layers=1)
    data = build(name, **options(name)).encode(grads).to_bytes()
    before = torch.get_num_threads()
    try:
        decoded = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            decoded.append(build(name, **options(name)).decode(Payload.from_bytes(data)))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(decoded[0][n], decoded[1][n]) for n in grads)


def test_quant_qsgd_is_unbiased_and_bits_fit_the_budget(grads):
    x = {"w": torch.linspace(-1, 1, 512).reshape(16, 32)}
    comp = build("quant", bits=2, stochastic=True, budget_bytes=10_000)
    mean = sum(comp.decode(comp.encode(x, step=s))["w"] for s in range(400)) / 400
    assert (mean - x["w"]).abs().max() < 0.12
    assert [build("quant", budget=b).encode(grads).info["bits"] for b in (0.6, 0.4, 0.2, 0.12)] == [8, 4, 2, 1]
    exact = {"w": torch.tensor([[0.5, -1.0, 0.25, 0.0]])}
    out = build("quant", bits=8, budget_bytes=1000).decode(build("quant", bits=8, budget_bytes=1000).encode(exact))
    assert (out["w"] - exact["w"]).abs().max() <= 1.0 / 254


def test_randk_unbiased_option_scales_and_topk_keeps_the_largest():
    x = {"w": torch.arange(1.0, 101.0).reshape(10, 10)}
    out = build("topk", budget_bytes=400, dtype="fp32").decode(build("topk", budget_bytes=400, dtype="fp32").encode(x))
    kept = out["w"][out["w"] != 0]
    assert len(kept) > 0 and torch.equal(kept, torch.arange(101.0 - len(kept), 101.0))
    plain = build("randk", budget_bytes=400, dtype="fp32")
    scaled = build("randk", budget_bytes=400, dtype="fp32", unbiased=True)
    a, b = plain.decode(plain.encode(x)), scaled.decode(scaled.encode(x))
    assert torch.equal(a["w"][a["w"] != 0], x["w"][a["w"] != 0])
    k = int((b["w"] != 0).sum())
    assert torch.allclose(b["w"][b["w"] != 0], x["w"][b["w"] != 0] * (100 / k))


@pytest.mark.parametrize("kwargs, key", [
    ({"budget": 0}, "compressor.budget: 0 is outside (0, 1]"),
    ({"budget": -0.1}, "compressor.budget: -0.1 is outside (0, 1]"),
    ({"budget": 1.5}, "compressor.budget: 1.5 is outside (0, 1]"),
    ({"budget_bytes": 0}, "compressor.budget_bytes: 0"),
    ({"budget": 0.1, "dtype": "fp8"}, "compressor.dtype (for spar): 'fp8' is not allowed; choose one of"),
    ({"budget": 0.1, "allocator": "best"}, "compressor.options.allocator: 'best'"),
    ({"budget": 0.1, "svd": "lanczos"}, "compressor.options.svd: 'lanczos' is not allowed; choose one of sketch"),
    ({"budget": 0.1, "sketch_columns": 0}, "compressor.options.sketch_columns: 0 is not allowed; an integer >= 1"),
    ({"budget": 0.1, "sketch_columns": True}, "compressor.options.sketch_columns: True is not allowed"),
    ({"budget": 0.1, "sketch_power": -1}, "compressor.options.sketch_power: -1 is not allowed; an integer >= 0"),
    ({"budget": 0.1, "typo_option": 1}, "compressor.options: 'typo_option' is not an option of spar"),
    ({}, "compressor.budget: None; spar needs a budget"),
])
def test_bad_arguments_are_rejected_with_key_value_and_allowed(kwargs, key):
    with pytest.raises(CompressorError) as err:
        build("spar", **kwargs)
    assert str(err.value).startswith("compressor.") and key in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_compressor_lists_the_names():
    with pytest.raises(CompressorError, match=f"'spr' is not a compressor; choose one of {', '.join(NAMES)}$"):
        build("spr")


@pytest.mark.parametrize("name", NAMES)
def test_bad_inputs_are_rejected(name):
    comp = build(name, **options(name))
    for bad, words in [({}, "non-empty dict"), ({"w": torch.zeros(0, 3)}, "'w' is empty"),
                       ({"w": torch.ones(2, 2, dtype=torch.int64)}, "floating-point"),
                       ({"w": torch.tensor([[1.0, float("nan")]])}, "NaN"),
                       ({"w": torch.tensor([[3e38, float("inf")], [1.0, 2.0]])}, "'w' has NaN or inf")]:
        with pytest.raises(CompressorError, match=words):
            comp.encode(bad)


def test_the_finiteness_check_accepts_finite_values_whose_float32_sum_overflows():
    """(Encoding them is another matter: Spar's Gram matrices overflow long before.)"""
    big = {"w": torch.full((64, 64), 3e38), "v": torch.randn(64, 64)}
    assert not torch.isfinite(big["w"].sum())
    prepared = build("identity")._prepare(big, 0)
    assert all(prepared[n] is not big[n] and torch.equal(prepared[n], big[n]) for n in big)


def test_a_budget_below_the_header_or_quant_floor_says_what_to_do(grads):
    for name in ("spar", "powersgd", "topk", "randk"):
        with pytest.raises(CompressorError, match="compressor.budget: 100 bytes cannot hold the header"):
            build(name, budget_bytes=100).encode(grads)
    with pytest.raises(CompressorError, match="below what quant can reach: 1-bit codes need"):
        build("quant", budget=0.05).encode(grads)
    with pytest.raises(CompressorError, match="cannot hold rank 4"):
        build("powersgd", rank=4, budget_bytes=2000).encode(grads)
    with pytest.raises(CompressorError, match="compressor.dtype \\(for quant\\): 'int8'"):
        build("quant", dtype="int8", budget=0.5)
