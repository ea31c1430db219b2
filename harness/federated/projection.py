"""SPRA's shared random projection: A is drawn from a seed, never sent.

Conventions (used by every party, the SNR study and the docs):

- Draw. For each (seed, period p, target module name) one standard normal matrix
  ``Z_p`` (r_max x d_in, float32) comes from a CPU ``torch.Generator`` seeded with the
  first 63 bits of ``SHA-256("{seed}/{period}/{module}")``. The CPU generator gives the
  same bits on every machine and thread count, so the server and every client hold the
  same Z_p without a byte of it on the wire.
- Variance. Client k (rank r_k <= r_max) uses ``A_k = Z_p[:r_k] / sqrt(r_k)``: entries
  N(0, 1/r_k) (variance 1/r, std 1/sqrt(r)), so ``E[A_k^T A_k] = I`` and the projected
  update ``G A_k^T A_k`` is unbiased for the full gradient G whatever the client's rank.
  This is NOT peft's ``init_lora_weights="gaussian"`` (std 1/r, variance 1/r^2), which is
  why A is written into the adapter by us (``make_lora(init="zeros")`` then :func:`client_a`).
- Scale. peft's LoRA scale is ``s_k = alpha_k / r_k`` (1 when alpha = rank).
- Coefficients. What the server keeps and what the wire carries is ``C`` (d_out x r_max),
  the adapter's product in the shared basis: ``delta W = C Z_p``. A client's B relates by
  ``s_k B_k A_k = C[:, :r_k] Z_p[:r_k]``, i.e. ``C[:, :r_k] = B_k * s_k / sqrt(r_k)``
  (:func:`to_coeff`, :func:`from_coeff`). Averaging columns of C is exact whatever the
  clients' ranks and scales, because every column multiplies the same row of Z_p.
- Merge-and-reset. Every T rounds every party does ``W <- W + C Z_p`` (the product in
  float64, rounded once to W's dtype), ``C <- 0`` (so B <- 0), and moves to period p+1
  (a fresh Z_{p+1}). Merging happens BEFORE the reset: resetting LoRA alone would lose B.
  Parties then compare :func:`checksum` of their base weights and Z (the row records it).
- Rank-aware learning rate: ``eta_k = eta_ref * f(r_k / r_ref)`` with f linear (default),
  sqrt or const (:func:`rank_lr`).
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping

import torch
from torch import Tensor

from harness.digest import state_checksum
from harness.seeds import derive

LR_RULES = ("linear", "sqrt", "const")


def draw_seed(seed: int, period: int, module: str) -> int:
    """The 63-bit generator seed of (run seed, period, module name); same everywhere."""
    return derive("projection", int(seed), int(period), module)


def draw(seed: int, period: int, module: str, rows: int, cols: int) -> Tensor:
    """Z_p of one module: ``rows x cols`` standard normal float32, a pure function of its inputs."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(draw_seed(seed, period, module))
    return torch.randn(rows, cols, generator=gen, dtype=torch.float32)


def client_a(z: Tensor, rank: int) -> Tensor:
    """A_k = Z[:r_k] / sqrt(r_k): variance 1/r_k, E[A_k^T A_k] = I."""
    if not 1 <= rank <= z.shape[0]:
        raise ValueError(f"rank {rank} outside 1..{z.shape[0]} (the rows of the shared draw)")
    return z[:rank] / math.sqrt(rank)


def coeff_factor(rank: int, scale: float) -> float:
    """The number that maps a client's B to coefficients: C[:, :r] = B * s / sqrt(r)."""
    return float(scale) / math.sqrt(rank)


def to_coeff(b: Tensor, rank: int, scale: float) -> Tensor:
    """Client B_k (d_out x r_k) -> its coefficients in the shared basis (d_out x r_k)."""
    return b * coeff_factor(rank, scale)


def from_coeff(c: Tensor, rank: int, scale: float) -> Tensor:
    """Coefficients C (d_out x >= r_k) -> the client's B_k = C[:, :r_k] * sqrt(r_k) / s_k."""
    return c[:, :rank] / coeff_factor(rank, scale)


def merge(weight: Tensor, c: Tensor, z: Tensor) -> None:
    """In place: ``weight += C Z`` (float64 product, rounded once to weight's dtype).

    ``c`` may be narrower than ``z`` (only its columns' rows of z are used). Every party
    runs this same op on the same bits, so their bases stay bit-identical (verified by
    :func:`checksum`, not assumed).
    """
    r = c.shape[1]
    delta = c.detach().to(torch.float64) @ z[:r].to(torch.float64)
    with torch.no_grad():
        weight.copy_((weight.detach().to(torch.float64) + delta).to(weight.dtype))


def checksum(tensors: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]]) -> str:
    """harness.digest.state_checksum in name order, first 16 hex chars."""
    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    return state_checksum(sorted(items, key=lambda kv: kv[0]))[:16]


def rank_lr(lr_ref: float, rank: int, r_ref: int, rule: str) -> float:
    """eta_k = eta_ref * f(r_k / r_ref); f = linear (x), sqrt (sqrt x) or const (1)."""
    if rule not in LR_RULES:
        raise ValueError(f"method.lr_rule: {rule!r} is not allowed; choose one of {', '.join(LR_RULES)}")
    x = rank / r_ref
    return float(lr_ref) * {"linear": x, "sqrt": math.sqrt(x), "const": 1.0}[rule]


def period_of(round_index: int, resample_every: int) -> int:
    """The projection period of a round (0-based rounds); T = 0 means never resample."""
    return 0 if resample_every <= 0 else round_index // resample_every
