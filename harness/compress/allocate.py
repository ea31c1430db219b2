"""Rank allocation under one byte budget: which singular triplets of which matrices to ship.

Problem. Matrix i has squared singular values e_i1 >= e_i2 >= ... (its spectral energies) and
every rank of it costs c_i bytes (a rank-k factor pair of an m x n matrix costs k*(m+n)
elements in the wire dtype). Choose ranks k_i to maximise the energy kept, sum_i sum_{j<=k_i}
e_ij (by Eckart-Young, ||M - M_k||^2 = ||M||^2 - kept energy, so this minimises the total
squared reconstruction error), subject to sum_i k_i * c_i <= budget.

Greedy (`allocate_greedy`, the default): take triplets in decreasing order of e_ij / c_i;
when the next one does not fit, drop that matrix (its later triplets cannot come before it)
and go on with the others, so the tail of the budget is filled with any affordable triplet.
Why it is (nearly) optimal:
  * Within a matrix the gains per byte e_ij / c_i are non-increasing (singular values are
    sorted and the cost per rank is constant), so every matrix's value is concave in k.
    For concave pieces the fractional relaxation (ranks may be fractional) is a fractional
    knapsack, solved exactly by taking items in ratio order (exchange argument); the
    "rank j before rank j+1" constraint never binds because ratio order already respects it.
    So the greedy prefix is optimal for the bytes it spends.
  * When all matrices have the same cost per rank (e.g. every q/k/v/o LoRA factor of a square
    layer), greedy takes the floor(budget/c) largest energies overall: exactly optimal.
  * In general the integer problem is a knapsack (NP-hard). The greedy loses at most the
    energy of the first triplet it had to skip: OPT <= LP optimum <= greedy + e_skip.
    `allocate_exact` solves it by dynamic programming over the budget in units of
    gcd(costs); tests check both against brute force on small cases.

Gains other than energy (Spar's ``allocation`` option): the allocators maximise any per-triplet
gains, as long as they are non-increasing within a matrix (the shipped factors are a matrix's
top-k triplets in singular-value order, so rank k buys triplets 1..k). `normalized_gains`
divides a matrix's energies by its squared Frobenius norm; `pooled` makes an arbitrary gain
sequence non-increasing by pool-adjacent-violators, i.e. replaces it by the slopes of the least
concave majorant of its cumulative sum: the cumulative gain is unchanged at every breakpoint of
that majorant, and greedy on the pooled gains is the fractional optimum of the concave hull.
"""
from __future__ import annotations

import math
from functools import reduce

import numpy as np


def _check(energies: list[np.ndarray], costs: list[int], budget: int) -> None:
    if len(energies) != len(costs):
        raise ValueError(f"{len(energies)} energy lists but {len(costs)} costs")
    if any(int(c) <= 0 for c in costs):
        raise ValueError(f"costs per rank must be positive bytes; got {costs}")
    if budget < 0:
        raise ValueError(f"budget must be >= 0 bytes; got {budget}")


def allocate_greedy(energies: list[np.ndarray], costs: list[int], budget: int) -> list[int]:
    """Ranks per matrix by energy per byte with tail fill (see module docstring).

    energies[i]: non-increasing squared singular values of matrix i; costs[i]: bytes per rank;
    budget: bytes. Returns k_i with sum k_i * costs[i] <= budget. Deterministic: ties are
    broken by (matrix index, rank index).
    """
    _check(energies, costs, budget)
    ranks = [0] * len(costs)
    if not energies:
        return ranks
    mat = np.concatenate([np.full(len(e), i, dtype=np.int64) for i, e in enumerate(energies)])
    pos = np.concatenate([np.arange(len(e), dtype=np.int64) for e in energies])
    gain = np.concatenate([np.asarray(e, dtype=np.float64) for e in energies])
    keep = gain > 0                                      # a zero-energy triplet is never worth a byte
    mat, pos, gain = mat[keep], pos[keep], gain[keep]
    cost = np.asarray(costs, dtype=np.int64)[mat]
    order = np.lexsort((pos, mat, -gain / cost))        # last key is primary: ratio, descending
    spent = np.cumsum(cost[order])
    prefix = int(np.searchsorted(spent, budget, side="right"))  # longest prefix that fits
    for i in mat[order[:prefix]]:
        ranks[int(i)] += 1
    left = budget - (int(spent[prefix - 1]) if prefix else 0)
    cheapest = int(cost.min()) if len(cost) else 0
    dropped = set()
    tail = order[prefix:]
    for i, c, p in zip(mat[tail].tolist(), cost[tail].tolist(), pos[tail].tolist()):  # tail fill
        if left < cheapest:                              # nothing fits any more: the rest is skipped
            break
        if i in dropped:
            continue
        if c <= left and p == ranks[i]:
            ranks[i] += 1
            left -= c
        else:
            dropped.add(i)
    return ranks


def allocate_exact(energies: list[np.ndarray], costs: list[int], budget: int,
                   max_cells: int = 200_000_000) -> list[int]:
    """The optimal ranks (a multiple-choice knapsack) by DP over budget units of gcd(costs).

    Cost O(sum_i K_i * budget / gcd); raises ValueError when that exceeds `max_cells`.
    """
    _check(energies, costs, budget)
    if not energies:
        return []
    unit = reduce(math.gcd, [int(c) for c in costs])
    cap = budget // unit
    cells = sum(len(e) for e in energies) * (cap + 1)
    if cells > max_cells:
        raise ValueError(f"exact allocation needs {cells} DP cells (> {max_cells}); use the greedy allocator")
    best = np.zeros(cap + 1)                             # best[b]: max energy within b units
    choice = np.zeros((len(energies), cap + 1), dtype=np.int32)
    for i, (e, c) in enumerate(zip(energies, costs)):
        step = int(c) // unit
        prefix = np.concatenate([[0.0], np.cumsum(np.asarray(e, dtype=np.float64))])
        new = best.copy()
        for k in range(1, len(prefix)):
            shift = k * step
            if shift > cap:
                break
            cand = np.full(cap + 1, -np.inf)
            cand[shift:] = best[:cap + 1 - shift] + prefix[k]
            better = cand > new
            new[better] = cand[better]
            choice[i, better] = k
        best = new
    ranks = [0] * len(energies)
    b = cap
    for i in range(len(energies) - 1, -1, -1):
        k = int(choice[i, b])
        ranks[i] = k
        b -= k * (int(costs[i]) // unit)
    return ranks


def kept_energy(energies: list[np.ndarray], ranks: list[int]) -> float:
    """Total energy of the first ranks[i] triplets of every matrix."""
    return float(sum(np.asarray(e, dtype=np.float64)[:k].sum() for e, k in zip(energies, ranks)))


def normalized_gains(energies: np.ndarray, total: float) -> np.ndarray:
    """Energies of one matrix as fractions of its squared Frobenius norm ``total`` (all zero when
    ``total`` is 0): every matrix is worth 1 in all, so the allocation minimises the SUM of the
    matrices' RELATIVE squared errors sum_i ||M_i - M^_i||^2 / ||M_i||^2 instead of the total
    squared error."""
    e = np.asarray(energies, dtype=np.float64)
    return e / total if total > 0 else np.zeros_like(e)


def pooled(gains: np.ndarray) -> np.ndarray:
    """The non-increasing sequence nearest to ``gains`` in the pool-adjacent-violators sense: every
    run of values that rises is replaced by its mean (equal weights), repeated until no rise is
    left. Equals the slopes of the least concave majorant of cumsum(gains) (see module doc);
    a non-increasing input is returned unchanged (a copy, float64)."""
    values: list[float] = []
    counts: list[int] = []
    for g in np.asarray(gains, dtype=np.float64).tolist():
        values.append(g)
        counts.append(1)
        while len(values) > 1 and values[-2] < values[-1]:
            v, c = values.pop(), counts.pop()
            values[-1] = (values[-1] * counts[-1] + v * c) / (counts[-1] + c)
            counts[-1] += c
    return np.repeat(np.asarray(values, dtype=np.float64), counts)
