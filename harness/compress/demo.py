"""demo: DeMo's compression (Peng, Quesnelle & Kingma 2024, "DeMo: Decoupled Momentum Optimization",
arXiv 2411.19870): a DCT per chunk, the top-k coefficients of every chunk, the rest kept as residual.

Per tensor, viewed as a matrix (rows = shape[0], columns = the rest; a 1-D tensor is one row):

    chunks   h x w tiles, h the largest divisor of rows <= ``chunk``, w likewise of columns
             (DeMo's ``_get_smaller_split``; 576 -> 64, 16 -> 16, 577 -> 1)
    encode   C = D_h X D_w^T per tile (D_n: the orthonormal DCT-II matrix of size n), then the k
             largest |C| of every tile: values in ``dtype`` + their flat indices in the tile
             (uint16 when h*w <= 65536, else int32), every byte counted against the budget
    decode   scatter the k values into zero tiles, X^ = D_h^T C D_w per tile (exact inverse:
             D is orthonormal)

``topk`` is DeMo's coefficients per chunk (its reference uses 32); left null, k is the largest
count, the same for every chunk (a tile smaller than k ships all of it), whose payload fits the
budget, header included; a budget that cannot hold one coefficient per chunk fails in the planner.
The residual (what the top-k dropped) is the error-feedback wrapper's (``error_feedback: true``):
``e_{t+1} = g_t + e_t - decode(encode(g_t + e_t))``, i.e. DeMo's decoupled momentum with decay 1
(the paper decays it by beta before adding the gradient) and without its sign step: the sync
method decides what the decoded gradient drives (hilo: the replicated AdamW step). Decoding is a
function of the payload alone (the tile sizes follow from the shapes and ``chunk`` in its table).
More coefficients per chunk (a larger budget or topk) => better reconstruction, more bytes.
"""
from __future__ import annotations

import functools
import math

import torch

from harness.compress.base import FLOAT_WIRE_DTYPES, BaseCompressor, CompressorError
from harness.compress.identity import dense_nbytes
from harness.compress.payload import (Payload, PayloadError, Record, TensorEntry, bytes_to_tensor, header_nbytes,
                                      table_bytes, tensor_to_bytes)
from harness.compress.sparsify import index_dtype

KIND_DCT = 6


def chunk_size(n: int, target: int) -> int:
    """The largest divisor of ``n`` that is <= ``target`` (``n`` itself when n <= target)."""
    if n <= target:
        return n
    return max(d for d in range(1, target + 1) if n % d == 0)


@functools.lru_cache(maxsize=64)
def dct_matrix(n: int) -> torch.Tensor:
    """The orthonormal DCT-II matrix D (n x n, float32): coefficients c = D x, inverse x = D^T c.
    Built in float64 from the closed form, then rounded once, so every process gets the same bits."""
    k = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(n, dtype=torch.float64).unsqueeze(0)
    d = torch.cos(math.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2.0 / n)
    d[0] /= math.sqrt(2.0)
    return d.to(torch.float32)


def tiles(shape: tuple[int, ...], chunk: int) -> tuple[int, int, int, int]:
    """(rows, cols, h, w) of a tensor of ``shape``: its matrix view and its tile edges."""
    rows = shape[0] if len(shape) >= 2 else 1
    cols = math.prod(shape) // rows if rows else 0
    return rows, cols, chunk_size(rows, chunk), chunk_size(cols, chunk)


def to_tiles(x: torch.Tensor, rows: int, cols: int, h: int, w: int) -> torch.Tensor:
    """[batch, rows, cols] -> [batch, rows/h * cols/w, h, w], tiles in row-major order."""
    b = x.shape[0]
    return x.reshape(b, rows // h, h, cols // w, w).permute(0, 1, 3, 2, 4).reshape(b, -1, h, w)


def from_tiles(t: torch.Tensor, rows: int, cols: int, h: int, w: int) -> torch.Tensor:
    """[rows/h * cols/w, h, w] -> [rows, cols] (the inverse of one tensor's to_tiles)."""
    return t.reshape(rows // h, cols // w, h, w).permute(0, 2, 1, 3).reshape(rows, cols)


class DeMo(BaseCompressor):
    """Top-k DCT coefficients per chunk (DeMo's fast components); values + indices."""
    name = "demo"
    wire_id = 6
    dtypes = FLOAT_WIRE_DTYPES

    def __init__(self, *, budget: float | None = None, budget_bytes: int | None = None, dtype: str = "bf16",
                 seed: int = 0, chunk: int = 64, topk: int | None = None) -> None:
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise CompressorError(f"compressor.options.chunk: {chunk!r} must be an integer >= 1 (the tile edge "
                                  "DeMo aims for; 64 in the paper)")
        if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int) or topk < 1):
            raise CompressorError(f"compressor.options.topk: {topk!r} must be an integer >= 1 (coefficients per "
                                  "chunk) or null (fit the budget)")
        self.chunk, self.topk = chunk, topk
        super().__init__(budget=budget, budget_bytes=budget_bytes, dtype=dtype, seed=seed)

    def _budget_optional(self) -> bool:
        return self.topk is not None

    def _fit_k(self, layout: list[tuple[int, int, int, int]], fixed: int, budget: int | None) -> int:
        """Coefficients per chunk: ``topk``, or the largest k whose payload fits ``budget``."""
        value = dense_nbytes(1, self.dtype)

        def cost(k: int) -> int:
            return sum((r // h) * (c // w) * min(k, h * w) * (value + dense_nbytes(1, index_dtype(h * w)))
                       for r, c, h, w in layout)

        if budget is not None and fixed > budget:
            raise self._over_budget(fixed, budget, "the header")
        if self.topk is not None:
            if budget is not None and fixed + cost(self.topk) > budget:
                raise self._over_budget(fixed + cost(self.topk), budget, f"topk={self.topk} coefficients per chunk")
            return self.topk
        if fixed + cost(1) > budget:
            raise self._over_budget(fixed + cost(1), budget, "one DCT coefficient per chunk")
        lo, hi = 1, max(h * w for _, _, h, w in layout)
        while lo < hi:                     # the largest k with fixed + cost(k) <= budget (cost grows with k)
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fixed + cost(mid) <= budget else (lo, mid - 1)
        return lo

    def _encode(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry], step: int,
                budget: int | None) -> Payload:
        meta = {"dtype": self.dtype, "chunk": self.chunk}
        fixed = header_nbytes(len(table_bytes(entries, meta)), [2] * len(entries))
        layout = [tiles(e.shape, self.chunk) for e in entries]
        k = self._fit_k(layout, fixed, budget)
        records: list[Record | None] = [None] * len(entries)
        counts = {}
        for (rows, cols, h, w), members in _groups(layout).items():       # one batched DCT per tensor layout
            x = torch.stack([tensors[entries[i].name].reshape(rows, cols).cpu() for i in members])
            coef = dct_matrix(h) @ to_tiles(x, rows, cols, h, w) @ dct_matrix(w).T
            flat = coef.reshape(len(members), -1, h * w)                  # [tensor, chunk, coefficient]
            kk = min(k, h * w)
            idx = torch.topk(flat.abs(), kk, dim=2, sorted=True).indices
            values = torch.gather(flat, 2, idx)
            for j, i in enumerate(members):
                records[i] = Record(KIND_DCT, kk, [tensor_to_bytes(values[j], self.dtype),
                                                   tensor_to_bytes(idx[j], index_dtype(h * w))])
                counts[entries[i].name] = kk * flat.shape[1]
        total = sum(counts.values())
        return self._payload(entries, records, step, meta, k=k, coefficients=total,
                             density=total / sum(e.numel for e in entries))

    @staticmethod
    def _decode(payload: Payload) -> dict[str, torch.Tensor]:
        chunk, dtype = int(payload.meta["chunk"]), payload.meta["dtype"]
        layout = [tiles(e.shape, chunk) for e in payload.entries]
        out = {}
        for (rows, cols, h, w), members in _groups(layout).items():       # one batched inverse per layout
            n = (rows // h) * (cols // w)
            coef = torch.zeros(len(members), n, h * w)
            for j, i in enumerate(members):
                e, r = payload.entries[i], payload.records[i]
                if r.kind != KIND_DCT or len(r.sections) != 2 or not 0 < r.param <= h * w:
                    raise PayloadError(f"demo: tensor {e.name!r} has an invalid record (kind {r.kind}, k {r.param})")
                values = bytes_to_tensor(r.sections[0], dtype).float()
                idx = bytes_to_tensor(r.sections[1], index_dtype(h * w)).to(torch.int64)
                if values.numel() != n * r.param or idx.numel() != n * r.param or int(idx.max()) >= h * w:
                    raise PayloadError(f"demo: tensor {e.name!r} sections do not match {n} chunks x k={r.param}")
                coef[j].scatter_(1, idx.reshape(n, r.param), values.reshape(n, r.param))
            x = dct_matrix(h).T @ coef.reshape(len(members), n, h, w) @ dct_matrix(w)
            for j, i in enumerate(members):
                e = payload.entries[i]
                out[e.name] = from_tiles(x[j], rows, cols, h, w).reshape(e.shape)
        return {e.name: out[e.name] for e in payload.entries}      # in the payload's order


def _groups(layout: list[tuple[int, int, int, int]]) -> dict[tuple[int, int, int, int], list[int]]:
    """Tensor positions by their (rows, cols, h, w), first-seen order (one batched transform each)."""
    groups: dict[tuple[int, int, int, int], list[int]] = {}
    for i, key in enumerate(layout):
        groups.setdefault(key, []).append(i)
    return groups
