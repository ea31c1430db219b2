"""Pure tier: Spar's Gram matrices computed during backward (compressor.options.backward_grams).

- the side thread's pieces, combined with the clipping factor, are the Gram matrices of what the
  encode gets (clipped gradient + error-feedback residual), for wide and tall matrices;
- Spar uses Gram matrices it is given (and only for that encode), refuses a wrong shape;
- a hilo learner with the option encodes without computing a Gram at encode time, keeps its
  worker bit-identical, and ships the same ranks as the default path on the same gradient;
- the option fails in the planner with any method but hilo, and with svd=svd.
"""
from __future__ import annotations

import copy
import threading
from types import SimpleNamespace

import pytest
import torch

from harness.compress import CompressorError
from harness.compress import spar as spar_module
from harness.errors import ConfigError
from harness.onpolicy.overlap import BackwardGrams
from harness.onpolicy.loop import _clip
from harness.plan import build_plan

from .helpers import compressor, lm_backward, make_peft
from .test_sync import pair


def _relative_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference relative to b's largest entry (absolute where b is 0: LoRA A's first gradient)."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1.0 if not b.any() else 0.0))


def test_combined_pieces_are_the_gram_of_the_clipped_corrected_gradient():
    model = make_peft(rank=8)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    g = torch.Generator().manual_seed(3)
    residual = {n: torch.randn(p.shape, generator=g) * 1e-2 for n, p in params.items()}
    side = BackwardGrams(params, lambda: residual)
    lm_backward(model, 0)
    side.wait()
    scale = 0.37
    grams = side.grams(scale)
    assert set(grams) == set(params)
    orientations = set()
    for n, p in params.items():
        x = (scale * p.grad + residual[n])
        orientations.add(x.shape[0] <= x.shape[1])
        assert _relative_gap(grams[n], spar_module._gram(x[None])[0]) < 1e-5, n
    assert orientations == {True, False}, "LoRA A (wide) and B (tall) matrices are both covered"
    assert side.grams(scale) is None, "the pieces are used once"


def test_without_a_residual_the_pieces_are_the_scaled_gram():
    model = make_peft(rank=8)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    side = BackwardGrams(params, dict)
    lm_backward(model, 1)
    side.wait()
    grams = side.grams(0.5)
    for n, p in params.items():
        assert _relative_gap(grams[n], spar_module._gram((0.5 * p.grad)[None])[0]) < 1e-6, n


def test_a_failure_on_the_side_thread_is_raised_by_wait():
    model = make_peft(rank=8)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}

    def broken():
        raise RuntimeError("no residual")
    side = BackwardGrams(params, broken)
    lm_backward(model, 0)
    with pytest.raises(RuntimeError, match="no residual"):
        side.wait()
    assert side.grams() is None
    assert copy.deepcopy(side).names == [], "a deep copy collects nothing"


def _spar_inputs():
    g = torch.Generator().manual_seed(0)
    return {"a": torch.randn(8, 40, generator=g) @ torch.diag(torch.linspace(3, 0.1, 40)),
            "b": torch.randn(40, 8, generator=g), "bias": torch.randn(5, generator=g)}


def test_spar_uses_the_grams_it_is_given_once():
    x = _spar_inputs()
    exact = {n: spar_module._gram(t[None])[0] for n, t in x.items() if t.ndim == 2}
    plain = compressor("spar", budget=0.3).encode(x, 0).to_bytes()
    given = compressor("spar", budget=0.3)
    given.provide_grams(exact)
    assert given.encode(x, 0).to_bytes() == plain, "the same Gram matrices give the same payload"
    # a different Gram for "a" changes what is shipped, and only in the encode it was given for
    poisoned = dict(exact, a=torch.eye(8) * float(exact["a"].trace()) / 8)
    given.provide_grams(poisoned)
    assert given.encode(x, 1).to_bytes() != compressor("spar", budget=0.3).encode(x, 1).to_bytes()
    assert given.encode(x, 2).to_bytes() == compressor("spar", budget=0.3).encode(x, 2).to_bytes()


def test_spar_refuses_a_gram_of_the_wrong_size_and_svd_without_grams():
    x = _spar_inputs()
    c = compressor("spar", budget=0.3)
    c.provide_grams({"a": torch.eye(40), "b": torch.eye(8)})
    with pytest.raises(CompressorError, match=r"spar.provide_grams: a has a Gram matrix of shape \(40, 40\), not \(8, 8\)"):
        c.encode(x, 0)
    with pytest.raises(CompressorError, match="compressor.options.backward_grams: True is not allowed with svd=svd"):
        compressor("spar", budget=0.3, svd="svd", backward_grams=True)
    with pytest.raises(CompressorError, match="compressor.options.backward_grams: 'yes' is not allowed"):
        compressor("spar", budget=0.3, backward_grams="yes")


def _hilo_steps(comp: dict, steps: int, clip: float = 0.5):
    lm, ls, wm, ws = pair("hilo", comp=comp)
    infos = []
    for step in range(steps):
        lm_backward(lm, step)
        ls.backward_done()
        _, scale = _clip(SimpleNamespace(replica=ls.replica), clip)
        update = ls.step(step, defer=True, grad_scale=scale)
        update.replay()
        ws.apply(update.payload, step)
        assert ws.checksum() == ls.expected_checksum(), f"step {step}"
        infos.append(update.info)
    return ls, infos


def test_hilo_with_backward_grams_computes_no_gram_at_encode_and_stays_in_sync(monkeypatch):
    default_ls, default_infos = _hilo_steps(dict(name="spar", budget=0.1), 1)

    def no_gram(batch):
        raise AssertionError("a Gram matrix was computed at encode time")
    monkeypatch.setattr(spar_module, "_gram", no_gram)
    ls, infos = _hilo_steps(dict(name="spar", budget=0.1, backward_grams=True), 4)
    assert ls.backward is not None and default_ls.backward is None
    assert infos[0]["ranks"] == default_infos[0]["ranks"], "same gradient, same ranks"
    assert abs(infos[0]["energy_kept"] - default_infos[0]["energy_kept"]) < 1e-4
    assert all(sum(i["ranks"].values()) > 0 for i in infos)


def test_warm_up_with_backward_grams_leaves_the_side_thread_alone():
    lm, ls, _, _ = pair("hilo", comp=dict(name="spar", budget=0.1, backward_grams=True))
    ls.warm_up()
    assert ls.backward._thread is None, "the warm-up ran no backward and started no thread"
    lm_backward(lm, 0)
    ls.backward_done()
    assert ls.backward.grams() is not None


def test_no_side_thread_outlives_a_backward():
    """A launcher with threads alive cannot fork its roles safely (it falls back to exec)."""
    lm, ls, _, _ = pair("hilo", comp=dict(name="spar", budget=0.1, backward_grams=True))
    lm_backward(lm, 0)
    assert any(t.name == "backward-grams" for t in threading.enumerate()), "backward started the side thread"
    ls.backward_done()
    assert not any(t.name == "backward-grams" for t in threading.enumerate())
    lm_backward(lm, 1)                   # the next backward starts a new one
    assert ls.step(1).payload
    assert not any(t.name == "backward-grams" for t in threading.enumerate())


@pytest.mark.parametrize("variant, extra, message", [
    ("delta_spar", [], "compressor.options.backward_grams: true is not allowed with method.name=delta; only hilo"),
    ("hilo_spar", ["compressor=powersgd"], "compressor.options: 'backward_grams' is not an option of powersgd"),
])
def test_backward_grams_fails_in_the_planner_outside_hilo_with_spar(variant, extra, message):
    from tests.config.test_plan import HILO, variant_cfg

    cfg = variant_cfg(HILO, variant, *extra, "+compressor.options.backward_grams=true")
    with pytest.raises(ConfigError) as err:
        build_plan(cfg)
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)
