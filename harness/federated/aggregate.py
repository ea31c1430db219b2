"""Aggregators of federated LoRA: small pure functions over lists of (tensors, weight).

Flower style: each function takes what the clients that finished the round sent, as a list
of ``(tensor(s), weight)`` pairs (weight = the client's number of training examples), and
returns the server's new state. A dropped client is simply absent from the list; an empty
list leaves the server state as it was. Nothing here touches a model, a process or a link.

Shapes (one adapted linear layer, LoRA ``delta W = s B A``): ``B`` is d_out x r, ``A`` is
r x d_in. Clients may hold different ranks r_k <= r_max; a rank-r_k client holds the first
r_k columns of B and rows of A (HetLoRA/SPRA truncation convention). "Component j" is the
rank-1 term ``B[:, j] A[j, :]``.

Which aggregator each method uses:
- spra, ffa: :func:`column_average` of B (A is shared and frozen, so never averaged).
  Exact: with a shared A, averaging column j of B over the clients that hold it is the
  same as averaging their rank-1 products ``B_k[:, j] A[j]``; with equal ranks this is
  ``(sum_k p_k B_k) A == sum_k p_k (B_k A)``. With ``federated.aggregation: product``
  (the ablation): :func:`padded_update_average` instead, the product reading below.
- fedit: :func:`column_average` of B and :func:`row_average` of A, separately (FedIT's
  FedAvg; inexact: ``avg(B) avg(A) != avg(B A)``).
- hetlora: :func:`zero_pad_average` of B and of A (pads count as zeros, weights normalised
  over all clients of the round) with HetLoRA's sparsity weights :func:`norm_weights`
  (``||B_k A_k||_F``), clients truncate to their rank.
- flora: :func:`stack` (exact: the stacked factors multiply to ``sum_k p_k B_k A_k``).
- flexlora: :func:`product_average` then :func:`svd_split` per client rank (B = U S, A = V^T).

Column normalisation (spra, ffa, fedit): column j is averaged over the clients that hold
it, with their weights renormalised over those clients (``w_k / sum_{l: r_l > j} w_l``),
so a column held by one high-rank client is that client's column, not a diluted one.
Columns that no client of the round holds keep the server's previous value (``base``).

Product reading (spra/ffa with ``federated.aggregation: product``): the server adds the
weighted average of the clients' product updates, sum_k p_k dW_k, with p_k = w_k / sum_l w_l
over ALL clients of the round (not renormalised per column) and dW_k = (B_k - B[:, :r_k]) A_k
client k's change of its adapter's product this round (B_k what it sent, B[:, :r_k] what it
was sent, A_k = A[:r_k] the rows of the shared A it used). Exact in B alone: A_k = P_k A with
P_k = [I_{r_k} 0] (r_k x r_max), so dW_k = pad(B_k - B[:, :r_k]) A, pad() appending zero
columns up to r_max, and sum_k p_k dW_k = (sum_k p_k pad(B_k - B[:, :r_k])) A: the new B is
``B + sum_k p_k pad(B_k - B[:, :r_k])`` and ``B_new A = B A + sum_k p_k dW_k`` to float64
rounding. Per column j that is B[:, j] + sum_{k: r_k > j} p_k (B_k[:, j] - B[:, j]): a client
moves column j by its share p_k whatever the others' ranks, where the column average gives
the holders all of it (a column only the rank-64 client holds moves by that client's whole
change). Clients that return what they were sent leave B unchanged (a fixed point); averaging
the clients' whole products sum_k p_k B_k A_k instead would shrink column j by the share of
the clients that do not hold it, every round, with no training at all.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

WeightedTensors = Sequence[tuple[Tensor, float]]


def normalised(weights: Sequence[float]) -> list[float]:
    """Weights divided by their sum; raises ValueError on a negative or all-zero list."""
    if any(w < 0 for w in weights):
        raise ValueError(f"aggregation weights must be >= 0, got {list(weights)}")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError(f"aggregation weights sum to {total}; at least one must be > 0")
    return [float(w) / total for w in weights]


def column_average(items: WeightedTensors, base: Tensor) -> Tensor:
    """Column-wise weighted average of B_k (d_out x r_k) over the clients holding each column.

    ``base`` (d_out x r_max) is the server's current B: it fixes the output shape and is
    kept in the columns no client of the round holds. Returns a new tensor of base's shape
    and dtype; sums run in float64 in list order (deterministic).
    """
    out = base.detach().to(torch.float64).clone()
    if not items:
        return out.to(base.dtype)
    width = base.shape[1]
    num = torch.zeros_like(out)
    den = torch.zeros(width, dtype=torch.float64)
    for tensor, weight in items:
        if tensor.dim() != 2 or tensor.shape[0] != base.shape[0] or tensor.shape[1] > width:
            raise ValueError(f"client tensor of shape {tuple(tensor.shape)} does not fit the server's "
                             f"{tuple(base.shape)} (rows must match, columns <= {width})")
        r = tensor.shape[1]
        num[:, :r] += float(weight) * tensor.detach().to(torch.float64)
        den[:r] += float(weight)
    held = den > 0
    out[:, held] = num[:, held] / den[held]
    return out.to(base.dtype)


def padded_update_average(items: WeightedTensors, base: Tensor) -> Tensor:
    """The product reading of the average for a shared A (module doc): ``base + sum_k p_k
    pad(B_k - base[:, :r_k])`` with p_k = w_k / sum_l w_l over every client of the round.

    ``items``: (B_k, w_k) with B_k d_out x r_k (r_k <= r_max), each client's B after training
    from ``base[:, :r_k]`` (this round's downlink); ``base``: the server's B (d_out x r_max).
    Returns a new tensor of base's shape and dtype; sums in float64 in list order; an empty
    round returns base unchanged.
    """
    out = base.detach().to(torch.float64).clone()
    if not items:
        return out.to(base.dtype)
    start = out.clone()
    for (tensor, _), p in zip(items, normalised([w for _, w in items])):
        if tensor.dim() != 2 or tensor.shape[0] != base.shape[0] or tensor.shape[1] > base.shape[1]:
            raise ValueError(f"client tensor of shape {tuple(tensor.shape)} does not fit the server's "
                             f"{tuple(base.shape)} (rows must match, columns <= {base.shape[1]})")
        r = tensor.shape[1]
        out[:, :r] += p * (tensor.detach().to(torch.float64) - start[:, :r])
    return out.to(base.dtype)


def row_average(items: WeightedTensors, base: Tensor) -> Tensor:
    """Row-wise weighted average of A_k (r_k x d_in) over the clients holding each row."""
    return column_average([(t.t(), w) for t, w in items], base.t()).t().contiguous()


def zero_pad_average(items: WeightedTensors, base: Tensor, dim: int) -> Tensor:
    """HetLoRA: zero-pad every client tensor along ``dim`` to base's size, weighted mean.

    Weights are normalised over all clients of the round, so a component held by few
    clients is shrunk towards zero (HetLoRA's known pressure on high-rank components).
    Components (indices along ``dim``) that no client of the round holds keep ``base``.
    """
    if not items:
        return base.detach().clone()
    out = torch.zeros(base.shape, dtype=torch.float64)
    held = 0
    for (tensor, _), p in zip(items, normalised([w for _, w in items])):
        if tensor.dim() != base.dim() or tensor.shape[dim] > base.shape[dim] or \
                any(tensor.shape[d] != base.shape[d] for d in range(base.dim()) if d != dim):
            raise ValueError(f"client tensor of shape {tuple(tensor.shape)} does not fit the server's "
                             f"{tuple(base.shape)} padded along dim {dim}")
        out.narrow(dim, 0, tensor.shape[dim]).add_(p * tensor.detach().to(torch.float64))
        held = max(held, tensor.shape[dim])
    rest = base.shape[dim] - held
    if rest:
        out.narrow(dim, held, rest).copy_(base.detach().narrow(dim, held, rest).to(torch.float64))
    return out.to(base.dtype)


def stack(items: Sequence[tuple[tuple[Tensor, Tensor], float]]) -> tuple[Tensor, Tensor]:
    """FLoRA: stack the clients' (B_k, A_k) into one adapter of rank sum_k r_k.

    Returns ``(B_s, A_s)`` with ``B_s = [p_1 B_1 | ... | p_K B_K]`` (d_out x sum r_k) and
    ``A_s = [A_1; ...; A_K]`` (sum r_k x d_in), so ``B_s A_s == sum_k p_k B_k A_k`` exactly
    up to float rounding (the weights p are folded into B). Raises on an empty list: a
    round with no client has nothing to stack (the caller skips the merge).
    """
    if not items:
        raise ValueError("stack: no client update to stack")
    weights = normalised([w for _, w in items])
    b_parts = [p * b.detach() for ((b, _), _), p in zip(items, weights)]
    a_parts = [a.detach() for (_, a), _ in items]
    return torch.cat(b_parts, dim=1), torch.cat(a_parts, dim=0)


def product_average(items: Sequence[tuple[tuple[Tensor, Tensor], float]]) -> Tensor:
    """FlexLoRA: the full-size weighted average ``sum_k p_k B_k A_k`` (d_out x d_in, float64)."""
    if not items:
        raise ValueError("product_average: no client update to average")
    weights = normalised([w for _, w in items])
    total = None
    for ((b, a), _), p in zip(items, weights):
        term = p * (b.detach().to(torch.float64) @ a.detach().to(torch.float64))
        total = term if total is None else total + term
    return total


def svd_split(delta: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """FlexLoRA redistribution: the best rank-``rank`` factors of ``delta`` (Eckart-Young).

    Returns ``(B, A)`` in float64 with ``B = U_r S_r`` and ``A = V_r^T``, so ``B A`` is the
    truncated SVD (Bai et al. 2024, FlexLoRA, Sec. 3: the server decomposes the weighted
    full-size average and gives client k its top-r_k singular components; the singular
    values go into B, A keeps orthonormal rows). No stabiliser: A's rows are unit vectors
    whatever S, so a component with S_j ~ 0 still has a live A row and B_j ~ 0 (an ordinary
    LoRA start, not a B = A = 0 saddle). ``rank`` may be at most min(d_out, d_in).
    """
    if not 1 <= rank <= min(delta.shape):
        raise ValueError(f"svd_split: rank {rank} outside 1..{min(delta.shape)} (the matrix is {tuple(delta.shape)})")
    u, s, vh = torch.linalg.svd(delta.to(torch.float64), full_matrices=False)
    return split_factors(u, s, vh, rank)


def split_factors(u: Tensor, s: Tensor, vh: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """:func:`svd_split` from a precomputed SVD (one SVD serves every client rank)."""
    return u[:, :rank] * s[:rank], vh[:rank].clone()


def norm_weights(items: Sequence[tuple[tuple[Tensor, Tensor], float]]) -> list[float]:
    """HetLoRA's sparsity-weighted aggregation weights: ``||B_k A_k||_F`` per client.

    Cho et al. 2024 (HetLoRA, Sec. 3.2) weight each client's zero-padded update by the
    Frobenius norm of its product ``B_k A_k`` (normalised over the round's clients), so an
    update that moved little (a sparse, uninformative one) pulls less. Returned unnormalised;
    :func:`zero_pad_average` normalises. An all-zero round falls back to equal weights.
    """
    norms = [float((b.detach().to(torch.float64) @ a.detach().to(torch.float64)).norm()) for (b, a), _ in items]
    return norms if sum(norms) > 0 else [1.0] * len(norms)
