"""topk and randk: ship a subset of the elements.

topk: the largest-magnitude elements over ALL tensors of the update (one global threshold),
shipped per tensor as values (wire dtype) + indices (uint16 when the tensor has <= 65536
elements, else int32; the index bytes count against the budget). k is the largest count whose
payload fits the budget.

randk: k_i elements of every tensor chosen uniformly at random from a generator seeded by
(seed, step, tensor name): the decoder regenerates the indices, so only values are sent.
k_i are proportional to the tensor sizes (largest remainders get the leftover). `unbiased=True`
scales decoded values by n_i / k_i (an unbiased estimate; with error feedback, leave it off).
"""
from __future__ import annotations

import numpy as np
import torch

from harness.compress.base import FLOAT_WIRE_DTYPES, BaseCompressor, generator
from harness.compress.identity import dense_nbytes
from harness.compress.payload import (Payload, PayloadError, Record, TensorEntry, bytes_to_tensor, header_nbytes,
                                      table_bytes, tensor_to_bytes)

KIND_SPARSE = 2


def index_dtype(numel: int) -> str:
    """Smallest wire dtype that holds every flat index of a tensor of `numel` elements."""
    if numel <= 1 << 16:
        return "uint16"
    return "int32" if numel <= 1 << 31 else "int64"


class TopK(BaseCompressor):
    """Largest |g| over all tensors under the budget; values + indices."""
    name = "topk"
    wire_id = 3
    dtypes = FLOAT_WIRE_DTYPES

    def _encode(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry], step: int,
                budget: int | None) -> Payload:
        meta = {"dtype": self.dtype}
        fixed = header_nbytes(len(table_bytes(entries, meta)), [2] * len(entries))
        if fixed > budget:
            raise self._over_budget(fixed, budget, "the header")
        left = budget - fixed
        vsize = dense_nbytes(1, self.dtype)
        costs = [vsize + dense_nbytes(1, index_dtype(e.numel)) for e in entries]
        flat = torch.cat([tensors[e.name].reshape(-1) for e in entries])
        owner_cost = torch.cat([torch.full((e.numel,), c, dtype=torch.int64) for e, c in zip(entries, costs)])
        kmax = min(flat.numel(), left // min(costs))
        chosen = torch.zeros(0, dtype=torch.int64)
        if kmax > 0:
            top = torch.topk(flat.abs(), kmax, sorted=True).indices.cpu()
            spent = torch.cumsum(owner_cost[top], 0)
            count = int(torch.searchsorted(spent, torch.tensor([left]), right=True)[0])
            chosen = top[:count]
        chosen = torch.sort(chosen).values
        records, start, counts = [], 0, {}
        flat_cpu = flat.cpu()
        for e in entries:
            lo = int(torch.searchsorted(chosen, torch.tensor([start]))[0])
            hi = int(torch.searchsorted(chosen, torch.tensor([start + e.numel]))[0])
            idx = chosen[lo:hi]
            records.append(Record(KIND_SPARSE, len(idx), [tensor_to_bytes(flat_cpu[idx], self.dtype),
                                                          tensor_to_bytes(idx - start, index_dtype(e.numel))]))
            counts[e.name] = len(idx)
            start += e.numel
        return self._payload(entries, records, step, meta, k=len(chosen), density=len(chosen) / flat.numel(),
                             counts=counts)

    @staticmethod
    def _decode(payload: Payload) -> dict[str, torch.Tensor]:
        out = {}
        for e, r in zip(payload.entries, payload.records):
            if r.kind != KIND_SPARSE or len(r.sections) != 2:
                raise PayloadError(f"topk: tensor {e.name!r} has record kind {r.kind} with {len(r.sections)} sections")
            values = bytes_to_tensor(r.sections[0], payload.meta["dtype"]).float()
            idx = bytes_to_tensor(r.sections[1], index_dtype(e.numel)).to(torch.int64)
            if len(values) != r.param or len(idx) != r.param or (r.param and int(idx.max()) >= e.numel):
                raise PayloadError(f"topk: tensor {e.name!r} sections do not match k={r.param}")
            dense = torch.zeros(e.numel)
            dense[idx] = values
            out[e.name] = dense.reshape(e.shape)
        return out


def proportional_counts(sizes: list[int], total: int) -> list[int]:
    """Split `total` (<= sum(sizes)) in proportion to `sizes`, largest remainders first."""
    n = sum(sizes)
    exact = np.array(sizes, dtype=np.float64) * (total / n)
    counts = np.minimum(np.floor(exact).astype(np.int64), sizes)
    order = np.lexsort((np.arange(len(sizes)), -(exact - counts)))
    leftover = total - int(counts.sum())
    for i in order:
        if leftover <= 0:
            break
        if counts[i] < sizes[i]:
            counts[i] += 1
            leftover -= 1
    return [int(c) for c in counts]


def random_indices(seed: int, step: int, name: str, numel: int, k: int) -> torch.Tensor:
    """The k sorted flat indices randk ships for tensor `name` at `step` (encoder and decoder)."""
    g = generator(seed, step, name, "randk")
    return torch.sort(torch.randperm(numel, generator=g)[:k]).values


class RandK(BaseCompressor):
    """k random elements per tensor from a shared seed; no index bytes."""
    name = "randk"
    wire_id = 4
    dtypes = FLOAT_WIRE_DTYPES

    def __init__(self, *, budget: float | None = None, budget_bytes: int | None = None, dtype: str = "bf16",
                 seed: int = 0, unbiased: bool = False) -> None:
        super().__init__(budget=budget, budget_bytes=budget_bytes, dtype=dtype, seed=seed)
        self.unbiased = bool(unbiased)

    def _encode(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry], step: int,
                budget: int | None) -> Payload:
        meta = {"dtype": self.dtype, "unbiased": self.unbiased}
        fixed = header_nbytes(len(table_bytes(entries, meta)), [1] * len(entries))
        if fixed > budget:
            raise self._over_budget(fixed, budget, "the header")
        sizes = [e.numel for e in entries]
        total = min(sum(sizes), (budget - fixed) // dense_nbytes(1, self.dtype))
        counts = proportional_counts(sizes, total)
        records = []
        for e, k in zip(entries, counts):
            idx = random_indices(self.seed, step, e.name, e.numel, k)
            values = tensors[e.name].reshape(-1).cpu()[idx]
            records.append(Record(KIND_SPARSE, k, [tensor_to_bytes(values, self.dtype)]))
        return self._payload(entries, records, step, meta, k=total, density=total / sum(sizes),
                             counts={e.name: k for e, k in zip(entries, counts)})

    @staticmethod
    def _decode(payload: Payload) -> dict[str, torch.Tensor]:
        out = {}
        for e, r in zip(payload.entries, payload.records):
            if r.kind != KIND_SPARSE or len(r.sections) != 1 or r.param > e.numel:
                raise PayloadError(f"randk: tensor {e.name!r} has an invalid record (kind {r.kind}, k {r.param})")
            values = bytes_to_tensor(r.sections[0], payload.meta["dtype"]).float()
            if len(values) != r.param:
                raise PayloadError(f"randk: tensor {e.name!r} carries {len(values)} values, expected {r.param}")
            if payload.meta["unbiased"] and r.param:
                values = values * (e.numel / r.param)
            dense = torch.zeros(e.numel)
            dense[random_indices(payload.seed, payload.step, e.name, e.numel, r.param)] = values
            out[e.name] = dense.reshape(e.shape)
        return out
