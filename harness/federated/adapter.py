"""A peft LoRA model seen as coefficients in a shared basis: what federated parties exchange.

Every party (server and clients) wraps its own PeftModel in an :class:`Adapter`. Each
adapted linear layer ("target", in a fixed sorted order shared by every party) holds

    delta W = s B A = C Z      with   B = C sqrt(v) / s,   A = Z / sqrt(v)

where r is this party's rank of the layer, s its peft scale (alpha / r) and v the variance
rank: v = r (default: A ~ N(0, 1/r_k)) or, with ``method.a_variance=ref``, v = r_ref for
every party (A ~ N(0, 1/r_ref): the SPRA ablation that separates A's variance from the
learning-rate rule). ``C``
(d_out x r, "coefficients") and ``Z`` (r x d_in, "basis", unit-variance rows when drawn)
are what the wire carries and what aggregators average; B and A are what the optimizer
sees. The convention makes A ~ N(0, 1/r) when Z ~ N(0, 1) (projection.py) and lets
clients of different ranks and scales be averaged exactly in (C, Z) space.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping

import torch
from torch import Tensor, nn

from harness.federated.projection import checksum

PREFIX = "base_model.model."


@dataclass(frozen=True)
class Target:
    """One adapted linear layer: its name (shared by every party) and shape."""
    name: str
    d_out: int
    d_in: int


class Adapter:
    """The LoRA layers of ``model`` (a peft PeftModel) in sorted name order."""

    def __init__(self, model: nn.Module, a_var_rank: int | None = None) -> None:
        from peft.tuners.lora import LoraLayer

        self.model = model
        self.a_var_rank = a_var_rank             # v of A = Z / sqrt(v); None: the layer's rank
        self.layers: dict[str, nn.Module] = {}
        for name, module in model.named_modules():
            if isinstance(module, LoraLayer) and "default" in module.lora_A:
                self.layers[name.removeprefix(PREFIX)] = module
        if not self.layers:
            raise ValueError("the model has no LoRA layer (adapter 'default'); build it with make_lora")
        self.layers = dict(sorted(self.layers.items()))
        self.targets = [Target(n, m.base_layer.out_features, m.base_layer.in_features)
                        for n, m in self.layers.items()]

    # -- shapes and scales ------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.layers)

    def rank(self, name: str) -> int:
        return int(self.layers[name].r["default"])

    def scale(self, name: str) -> float:
        return float(self.layers[name].scaling["default"])

    def var_rank(self, name: str) -> int:
        """v of ``A = Z / sqrt(v)``: the layer's rank, or the run's a_var_rank (r_ref)."""
        return int(self.a_var_rank) if self.a_var_rank else self.rank(name)

    def factor(self, name: str) -> float:
        """s / sqrt(v): C = B * factor, B = C / factor."""
        return self.scale(name) / math.sqrt(self.var_rank(name))

    # -- parameters -------------------------------------------------------------------------
    def a(self, name: str) -> nn.Parameter:
        return self.layers[name].lora_A["default"].weight

    def b(self, name: str) -> nn.Parameter:
        return self.layers[name].lora_B["default"].weight

    def base(self, name: str) -> Tensor:
        return self.layers[name].base_layer.weight

    def load(self, name: str, c: Tensor, z: Tensor | None = None) -> None:
        """Set B from coefficients C (d_out x >= r: first r columns) and, if given, A from Z."""
        r = self.rank(name)
        with torch.no_grad():
            b = self.b(name)
            b.copy_((c[:, :r].to(torch.float64) / self.factor(name)).to(b.dtype))
            if z is not None:
                a = self.a(name)
                a.copy_((z[:r].to(torch.float64) / math.sqrt(self.var_rank(name))).to(a.dtype))

    def coeffs(self, name: str) -> Tensor:
        """C = B * s / sqrt(v) (d_out x r, float32)."""
        return (self.b(name).detach().to(torch.float64) * self.factor(name)).float()

    def basis(self, name: str) -> Tensor:
        """Z = A * sqrt(v) (r x d_in, float32)."""
        return (self.a(name).detach().to(torch.float64) * math.sqrt(self.var_rank(name))).float()

    def resize(self, name: str, rank: int) -> None:
        """Shrink target ``name``'s LoRA to its first ``rank`` components (HetLoRA's pruning).

        The kept components' product is unchanged: C[:, :rank] and Z[:rank] are read before and
        loaded after. The scale keeps its convention (alpha = r, scale 1, stays scale 1; a fixed
        alpha gives alpha / rank). New parameters: the caller builds a fresh optimizer.
        """
        old = self.rank(name)
        if not 1 <= rank <= old:
            raise ValueError(f"resize {name}: rank {rank} outside 1..{old}")
        if rank == old:
            return
        c, z = self.coeffs(name), self.basis(name)
        layer = self.layers[name]
        a_old, b_old = layer.lora_A["default"], layer.lora_B["default"]
        scale = self.scale(name)
        same_scale = float(layer.lora_alpha["default"]) == float(old)
        layer.lora_A["default"] = nn.Linear(a_old.in_features, rank, bias=False).to(a_old.weight)
        layer.lora_B["default"] = nn.Linear(rank, b_old.out_features, bias=False).to(b_old.weight)
        layer.r["default"] = rank
        if same_scale:
            layer.lora_alpha["default"] = rank
        layer.scaling["default"] = scale if same_scale else float(layer.lora_alpha["default"]) / rank
        self.load(name, c, z)

    def freeze_a(self, frozen: bool) -> None:
        """Frozen A gets no gradient at all (requires_grad False: backward skips its matmul)."""
        for name in self.layers:
            self.a(name).requires_grad_(not frozen)
            self.b(name).requires_grad_(True)

    def trainable(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def base_checksum(self, extra: Mapping[str, Tensor] | None = None) -> str:
        """Checksum of every target's base weight (and ``extra`` tensors, e.g. the shared Z)."""
        items = {f"base/{n}": self.base(n) for n in self.layers}
        items.update({f"extra/{k}": v for k, v in (extra or {}).items()})
        return checksum(items)

    @contextmanager
    def evaluating(self, deltas: Mapping[str, Tensor]) -> Iterator[nn.Module]:
        """The model with W + delta in every target and the adapter off; restored after.

        ``deltas`` holds full d_out x d_in updates (any dtype); the original base weights
        are copied back bit for bit on exit.
        """
        saved = {n: self.base(n).detach().clone() for n in deltas}
        try:
            with torch.no_grad():
                for n, d in deltas.items():
                    w = self.base(n)
                    w.copy_((w.to(torch.float64) + d.to(torch.float64)).to(w.dtype))
            with self.model.disable_adapter():
                yield self.model
        finally:
            with torch.no_grad():
                for n, w in saved.items():
                    self.base(n).copy_(w)
