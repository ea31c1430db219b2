"""HetLoRA's local rank self-pruning (Cho et al. 2024, "Heterogeneous LoRA for Federated
Fine-tuning of On-Device Foundation Models", EMNLP, arXiv 2401.06432, Sec. 3, "rank self-pruning").

A client of rank r trains with its task loss plus a penalty on the *tail* of its LoRA, the
components it would lose if it pruned its rank by the decay factor gamma:

    keep(r)  = max(1, floor(gamma * r))                  (the rank after one pruning step)
    tail     = components keep(r) .. r-1                  (B's last columns, A's last rows)
    loss     = task loss + lambda * sum_targets ||B_tail||_F ||A_tail||_F

After its local steps it prunes (r <- keep(r)) when the tail's update norm
``sqrt(sum_targets ||s B_tail A_tail||_F^2)`` is smaller than it was when the round began (the
tail of the global model it received, i.e. of the previous round's aggregate): the penalty won
against the data, the tail is on its way out. The pruned rank persists: the client keeps it for
the rest of the run, downloads the global factors truncated to it and uploads at it.

Pure functions over tensors; the client loop (client.py) calls them and resizes its adapter
(adapter.Adapter.resize). Nothing here touches a process or a link.
"""
from __future__ import annotations

import math
from typing import Iterable

import torch
from torch import Tensor


def keep_rank(rank: int, gamma: float) -> int:
    """The rank after one pruning step: max(1, floor(gamma * rank)) (rank itself when nothing can go)."""
    if not 0 < gamma <= 1:
        raise ValueError(f"prune gamma {gamma} outside (0, 1]")
    return max(1, min(rank, math.floor(gamma * rank)))


def tail_penalty(factors: Iterable[tuple[Tensor, Tensor]], keep: int) -> Tensor:
    """``sum ||B[:, keep:]||_F ||A[keep:]||_F`` over (B, A) pairs (differentiable; 0 if no tail)."""
    total = None
    for b, a in factors:
        if b.shape[1] <= keep:
            continue
        term = b[:, keep:].norm() * a[keep:].norm()
        total = term if total is None else total + term
    return total if total is not None else torch.zeros(())


def tail_norm(products: Iterable[tuple[Tensor, Tensor]], keep: int) -> float:
    """``sqrt(sum ||C[:, keep:] Z[keep:]||_F^2)`` over (C, Z) pairs: the tail's share of delta W (float64)."""
    sq = 0.0
    for c, z in products:
        if c.shape[1] > keep:
            sq += float((c[:, keep:].to(torch.float64) @ z[keep:].to(torch.float64)).norm()) ** 2
    return math.sqrt(sq)


def should_prune(rank: int, keep: int, tail_before: float, tail_after: float) -> bool:
    """Prune when there is a tail (keep < rank) and local training shrank it (after < before)."""
    return keep < rank and tail_after < tail_before
