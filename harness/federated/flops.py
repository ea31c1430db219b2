"""Exact matmul FLOPs of a client's local training, counted from shapes and what is trainable.

Convention (what a researcher in the field counts, as in Kaplan et al.'s 6ND): one
multiply-add is 2 FLOPs; a matmul of (n x k) by (k x m) costs ``2 n k m``. Counted per
linear layer of the model (every ``nn.Linear`` and transformers ``Conv1D``, the LM head
included) and per LoRA pair on it, for ``tokens`` rows (every position of the batch,
padding included: it is computed):

- forward: ``2 N d_in d_out`` for the frozen weight; with LoRA ``2 N d_in r`` (x A^T) and
  ``2 N r d_out`` (h B^T);
- backward to the inputs: the same again for every matmul whose input needs a gradient.
  A layer's input needs one iff autograd says so (its ``requires_grad`` at forward time,
  observed by :func:`observe`: the first layers before any trainable parameter need none);
  inside a LoRA pair the input of B (``h = x A^T``) needs one iff A is trainable or x
  needs one;
- weight gradients: ``2 N d_in d_out`` only for trainable weights. The base weight is
  frozen (none); B's gradient ``2 N r d_out``; A's gradient ``2 N d_in r`` only when A is
  trainable (a frozen A, spra/ffa, has ``requires_grad=False``: autograd skips it).

LoRA's own FLOPs (:func:`adapter_flops`, the second reading of a compute claim): what the
adapter adds over the frozen model's forward and backward, i.e. the count above minus the
frozen weight's terms (``2 N d_in d_out`` forward, and the same backward to the inputs where
the input needs a gradient): the LoRA matmuls alone, x A^T and h B^T forward, backward through
them where autograd runs it, and A's and B's weight gradients. Per square layer (d_in = d_out)
after a trainable one it is 6 units of ``2 N d r`` with A trained, 5 with A frozen (no A
gradient); on the first LoRA layer (input needs no gradient) 5 against 3 (a frozen A needs no
h gradient either).

Not counted (identical for every method on the same model and batch, so they cancel in
any ratio between methods, and small next to the linears): attention scores and their
softmax, norms, activations, the loss, the optimizer step. The count matches
``torch.utils.flop_counter.FlopCounterMode`` on the linears (tests/federated/test_flops.py).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import nn


@dataclass(frozen=True)
class LinearShape:
    """One linear layer as the count needs it (d_in, d_out in features; rank 0: no LoRA)."""
    d_in: int
    d_out: int
    rank: int = 0                # LoRA rank on this layer (0: none)
    a_trainable: bool = False    # LoRA A receives a gradient
    b_trainable: bool = False    # LoRA B receives a gradient
    w_trainable: bool = False    # the base weight receives a gradient
    input_grad: bool = False     # the layer's input requires grad (backward to inputs computed)


@dataclass(frozen=True)
class Flops:
    """FLOPs of one pass, split as forward, backward to inputs, weight gradients."""
    forward: int = 0
    input_grad: int = 0
    weight_grad: int = 0

    @property
    def total(self) -> int:
        return self.forward + self.input_grad + self.weight_grad

    def __add__(self, other: "Flops") -> "Flops":
        return Flops(self.forward + other.forward, self.input_grad + other.input_grad,
                     self.weight_grad + other.weight_grad)

    def scaled(self, factor: int) -> "Flops":
        return Flops(self.forward * factor, self.input_grad * factor, self.weight_grad * factor)


def linear_flops(shape: LinearShape, tokens: int) -> Flops:
    """FLOPs of one training pass (forward + backward) of one linear layer on ``tokens`` rows."""
    n, di, do, r = int(tokens), shape.d_in, shape.d_out, shape.rank
    dense = 2 * n * di * do
    fwd, ig, wg = dense, dense if shape.input_grad else 0, dense if shape.w_trainable else 0
    if r > 0:
        down, up = 2 * n * di * r, 2 * n * r * do             # x A^T, h B^T
        fwd += down + up
        h_needs_grad = shape.a_trainable or shape.input_grad
        ig += (up if h_needs_grad else 0) + (down if shape.input_grad else 0)
        wg += (up if shape.b_trainable else 0) + (down if shape.a_trainable else 0)
    trainable = shape.w_trainable or (r > 0 and (shape.a_trainable or shape.b_trainable))
    if not trainable and not shape.input_grad:
        return Flops(fwd, 0, 0)                                # no backward through this layer at all
    return Flops(fwd, ig, wg)


def adapter_flops(shape: LinearShape, tokens: int) -> Flops:
    """LoRA's own FLOPs on one layer (module doc): :func:`linear_flops` without the frozen
    weight's forward and backward to the inputs; zero for a layer without LoRA. Requires a
    frozen base weight (ValueError otherwise: its gradient would be neither LoRA's nor the
    frozen model's)."""
    if shape.w_trainable:
        raise ValueError(f"adapter_flops: a trainable base weight ({shape.d_in} -> {shape.d_out}) is not LoRA")
    if shape.rank == 0:
        return Flops()
    whole = linear_flops(shape, tokens)
    dense = 2 * int(tokens) * shape.d_in * shape.d_out
    return Flops(whole.forward - dense, whole.input_grad - (dense if shape.input_grad else 0), whole.weight_grad)


def step_flops(shapes: list[LinearShape], tokens: int) -> Flops:
    """FLOPs of one training step (forward + backward) over every linear layer."""
    total = Flops()
    for shape in shapes:
        total = total + linear_flops(shape, tokens)
    return total


def step_adapter_flops(shapes: list[LinearShape], tokens: int) -> Flops:
    """LoRA's own FLOPs of one training step over every linear layer (:func:`adapter_flops`)."""
    total = Flops()
    for shape in shapes:
        total = total + adapter_flops(shape, tokens)
    return total


def _is_linear(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def _dims(module: nn.Module) -> tuple[int, int]:
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    d_in, d_out = module.weight.shape                          # transformers Conv1D: weight is d_in x d_out
    return int(d_in), int(d_out)


@contextmanager
def observe(model: nn.Module) -> Iterator[list[LinearShape]]:
    """Record the :class:`LinearShape` of every linear layer during the forward passes inside.

    peft LoRA layers are recorded as one shape (base + A + B); their inner linears are not
    counted twice. The list fills when the model runs a forward pass in the block (the first
    pass only); the trainable flags are read then, so freeze or unfreeze before it.
    """
    from peft.tuners.lora import LoraLayer

    shapes: list[LinearShape] = []
    seen: set[int] = set()
    inner: set[int] = set()
    handles = []
    for module in model.modules():
        if isinstance(module, LoraLayer) and "default" in module.lora_A:
            inner.update(id(m) for m in (module.base_layer, module.lora_A["default"], module.lora_B["default"]))
    for module in model.modules():
        if id(module) in inner:
            continue
        if isinstance(module, LoraLayer) and "default" in module.lora_A:
            def hook(mod, args, _kw=None, *, lora=True):
                _record(mod, args, lora)
        elif _is_linear(module):
            def hook(mod, args, _kw=None, *, lora=False):
                _record(mod, args, lora)
        else:
            continue
        handles.append(module.register_forward_pre_hook(hook))

    def _record(mod: nn.Module, args: tuple, lora: bool) -> None:
        if id(mod) in seen or not args or not isinstance(args[0], torch.Tensor):
            return
        seen.add(id(mod))
        x = args[0]
        if lora:
            base, a, b = mod.base_layer, mod.lora_A["default"], mod.lora_B["default"]
            d_in, d_out = _dims(base)
            shapes.append(LinearShape(d_in, d_out, int(mod.r["default"]), a.weight.requires_grad,
                                      b.weight.requires_grad, base.weight.requires_grad, x.requires_grad))
        else:
            d_in, d_out = _dims(mod)
            shapes.append(LinearShape(d_in, d_out, 0, False, False, mod.weight.requires_grad, x.requires_grad))

    try:
        yield shapes
    finally:
        for h in handles:
            h.remove()


def batch_tokens(batch: dict[str, torch.Tensor]) -> int:
    """Rows every linear layer sees for one batch: batch size x sequence length (padding included)."""
    return int(batch["input_ids"].numel())
