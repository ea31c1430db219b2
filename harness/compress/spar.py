"""spar: spectral truncation with adaptive rank allocation under one byte budget.

Every matrix of the update (a tensor with ndim >= 2, viewed as shape[0] x rest) is replaced by
its top-k singular triplets, shipped as a factor pair P (m x k), Q (n x k) in the wire dtype
(see factors.py). The ranks k_i are chosen jointly for ALL matrices so that the spectral energy
kept is maximal under the budget (allocate.py: greedy by sigma^2 per byte with tail fill, or the
exact DP); matrices with little energy get rank 0. Tensors with ndim < 2 (biases, scalars) are
shipped dense (bf16, or the wire dtype when it is a float type) and counted first.

Byte accounting: budget >= header + dense tensors + sum_i k_i * rank_nbytes(m_i, n_i); the header
(payload.py) does not depend on the ranks, so it is known before allocation.

Fast spectra for thin LoRA gradients (A-grad r x d_in, B-grad d_out x r, r << d): the default
`svd="gram"` forms the small Gram matrix (M M^T if m <= n else M^T M) of every matrix, batched
by shape, takes only its EIGENVALUES (`eigvalsh`) for the allocation, and then eigenvectors
(`eigh`, batched) only for the matrices that got rank > 0 (at a 1.6% budget on the tiny model
4 of 28 matrices; eigvalsh of a 64 x 64 batch is ~8x cheaper than eigh here), and ships the
projection form on k columns: for m <= n, P = U_k and Q = M^T U_k, so that
P Q^T = U_k U_k^T M; for m > n, P = M V_k and Q = V_k. No division by sigma, so tiny singular
values cost no accuracy, and the result is the best rank-k approximation for the eigenvectors
found. Measured on this machine's 2-core CPU (batch of 8, fp32): 64x256 gram+eigh 2.2 ms vs
torch.linalg.svd(full_matrices=False) 14 ms; 64x512 1.8 vs 27 ms; 512x64 2.0 vs 7 ms; 64x4096
4.2 vs 70 ms. LAPACK's gesdd works on the full thin matrix; eigh only on r x r. `svd="svd"` is
kept as the reference (and for benchmarks: `python -m harness.compress.bench` times both).

info: ranks {name: k} (per step: the report's rank heatmap), energy_kept (fraction of the
squared norm of the matrices kept before rounding), dense (number of tensors shipped dense).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from harness.compress import factors
from harness.compress.allocate import allocate_exact, allocate_greedy
from harness.compress.base import WIRE_DTYPES, BaseCompressor, check_choice
from harness.compress.identity import KIND_DENSE, dense_decode, dense_nbytes, dense_record
from harness.compress.payload import Payload, PayloadError, Record, TensorEntry, header_nbytes, table_bytes

ALLOCATORS = ("greedy", "exact")


@dataclass
class _Group:
    """Matrices of one shape: their indices, the batch (b, m, n), its Gram matrices (b, r, r)
    on the gram path, and on the svd path the bases ``spectra`` returned; ``vectors``: the Gram
    matrices' eigenvectors when ``_energies`` computed them for every matrix."""
    idx: list[int]
    batch: torch.Tensor
    gram: torch.Tensor | None
    left: torch.Tensor | None = None
    right: torch.Tensor | None = None
    vectors: torch.Tensor | None = None
SVD_METHODS = ("gram", "svd")


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(m, n) for a tensor compressed as a matrix, None for one shipped dense."""
    if len(shape) < 2:
        return None
    return shape[0], math.prod(shape[1:])


def spectra(mats: torch.Tensor, method: str = "gram") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Energies (b, r) in descending order and bases for a batch of m x n matrices (b, m, n).

    Returns (energy, left, right) such that the best rank-k approximation of mats[i] is
    left[i, :, :k] @ right[i, :, :k].T, r = min(m, n).
    """
    m, n = mats.shape[-2:]
    if method == "svd":
        u, s, vh = torch.linalg.svd(mats, full_matrices=False)
        return s.square(), u * s.unsqueeze(-2), vh.mT
    if m <= n:
        lam, u = torch.linalg.eigh(mats @ mats.mT)
        lam, u = lam.flip(-1), u.flip(-1)                 # descending
        return lam.clamp_min(0), u, mats.mT @ u
    lam, v = torch.linalg.eigh(mats.mT @ mats)
    lam, v = lam.flip(-1), v.flip(-1)
    return lam.clamp_min(0), mats @ v, v


def layout(entries: list[TensorEntry], meta: dict, dtype: str, dense_dtype: str
           ) -> tuple[list[tuple[int, int] | None], int]:
    """Matrix shape (or None: dense) per tensor, and the bytes that do not depend on ranks:
    the header plus the dense tensors."""
    shapes = [matrix_shape(e.shape) for e in entries]
    nsec = [factors.nsections(dtype) if s else 1 for s in shapes]
    fixed = header_nbytes(len(table_bytes(entries, meta)), nsec)
    fixed += sum(dense_nbytes(e.numel, dense_dtype) for e, s in zip(entries, shapes) if s is None)
    return shapes, fixed


def decode_factored(payload: Payload) -> dict[str, torch.Tensor]:
    """Decode a payload of factor pairs and dense tensors (spar and powersgd share the layout)."""
    dtype, dense_dtype = payload.meta["dtype"], payload.meta["dense_dtype"]
    out = {}
    for e, r in zip(payload.entries, payload.records):
        shape = matrix_shape(e.shape)
        if r.kind == KIND_DENSE and shape is None:
            out[e.name] = dense_decode(r, e, dense_dtype)
        elif r.kind == factors.KIND_FACTORS and shape is not None:
            out[e.name] = factors.decode_pair(r.sections, *shape, r.param, dtype).reshape(e.shape)
        else:
            raise PayloadError(f"{payload.compressor}: tensor {e.name!r} has record kind {r.kind}, "
                               f"not valid for shape {e.shape}")
    return out


class Spar(BaseCompressor):
    """Budget-aware spectral compressor; lower budget => fewer triplets shipped."""
    name = "spar"
    dtypes = WIRE_DTYPES

    def __init__(self, *, budget: float | None = None, budget_bytes: int | None = None, dtype: str = "bf16",
                 seed: int = 0, allocator: str = "greedy", svd: str = "gram") -> None:
        super().__init__(budget=budget, budget_bytes=budget_bytes, dtype=dtype, seed=seed)
        self.allocator = check_choice("compressor.options.allocator", allocator, ALLOCATORS)
        self.svd = check_choice("compressor.options.svd", svd, SVD_METHODS)
        self.dense_dtype = dtype if dtype != "int8" else "bf16"

    def _encode(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry], step: int,
                budget: int | None) -> Payload:
        meta = {"dtype": self.dtype, "dense_dtype": self.dense_dtype}
        shapes, fixed = layout(entries, meta, self.dtype, self.dense_dtype)
        if fixed > budget:
            raise self._over_budget(fixed, budget, f"the header and {sum(s is None for s in shapes)} dense tensors")

        matrices = [i for i, s in enumerate(shapes) if s]
        groups = self._groups(tensors, entries, matrices)
        costs = [factors.rank_nbytes(*shapes[i], self.dtype) for i in matrices]
        # Where the budget buys rank 1 for every matrix (LLM proportions), nearly every matrix needs
        # its eigenvectors anyway: one eigh per group then gives values and vectors at once. Below
        # that (the tiny model at 1.6%), eigenvalues for all and vectors only where rank > 0.
        energy = self._energies(groups, vectors=budget - fixed >= sum(costs))
        allocate = allocate_exact if self.allocator == "exact" else allocate_greedy
        ranks = dict(zip(matrices, allocate([energy[i] for i in matrices], costs, budget - fixed)))
        pairs = self._factors(groups, ranks)                     # bases only where rank > 0

        records = []
        for i, e in enumerate(entries):
            if shapes[i] is None:
                records.append(dense_record(tensors[e.name], self.dense_dtype))
                continue
            left, right = pairs[i]
            records.append(Record(factors.KIND_FACTORS, ranks[i], factors.encode_pair(left, right, self.dtype)))
        total = sum(float(energy[i].sum()) for i in matrices)
        kept = sum(float(energy[i][:ranks[i]].sum()) for i in matrices)
        return self._payload(entries, records, step, meta,
                             ranks={entries[i].name: ranks[i] for i in matrices},
                             energy_kept=kept / total if total > 0 else 1.0,
                             dense=len(entries) - len(matrices))

    def _groups(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry],
                matrices: list[int]) -> list[_Group]:
        """The matrices batched by shape, with their small Gram matrices (gram method)."""
        by_shape: dict[tuple[int, int], list[int]] = {}
        for i in matrices:
            by_shape.setdefault(matrix_shape(entries[i].shape), []).append(i)
        groups = []
        for (m, n), idx in by_shape.items():
            batch = torch.stack([tensors[entries[i].name].reshape(m, n) for i in idx])
            gram = None if self.svd == "svd" else (batch @ batch.mT if m <= n else batch.mT @ batch)
            groups.append(_Group(idx, batch, gram))
        return groups

    def _energies(self, groups: list[_Group], vectors: bool = False) -> dict[int, np.ndarray]:
        """Per matrix index: its spectral energies (squared singular values), descending, float64.

        gram: ``eigvalsh`` of the Gram matrix, no eigenvectors (several times cheaper than
        ``eigh``; only the few matrices that get a rank need vectors, see ``_factors``); with
        ``vectors``, one ``eigh`` whose vectors ``_factors`` reuses.
        svd: the reference path, whose bases are kept for ``_factors``.
        """
        energy = {}
        for g in groups:
            if g.gram is None:
                e, g.left, g.right = spectra(g.batch, "svd")
            elif vectors:
                lam, g.vectors = torch.linalg.eigh(g.gram)
                e = lam.flip(-1).clamp_min(0)
            else:
                e = torch.linalg.eigvalsh(g.gram).flip(-1).clamp_min(0)
            values = e.double().cpu().numpy()
            for j, i in enumerate(g.idx):
                energy[i] = values[j]
        return energy

    def _factors(self, groups: list[_Group], ranks: dict[int, int]) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Per matrix index: the factor pair (m x k, n x k) of its rank k. gram: one batched
        ``eigh`` over the Gram matrices of the matrices with k > 0 (of one shape), then the
        projection form (module docstring) on k columns only; k = 0 costs nothing."""
        out = {}
        for g in groups:
            m, n = g.batch.shape[-2:]
            if g.gram is None:
                for j, i in enumerate(g.idx):
                    out[i] = (g.left[j][:, :ranks[i]], g.right[j][:, :ranks[i]])
                continue
            chosen = [j for j, i in enumerate(g.idx) if ranks[i] > 0]
            if g.vectors is not None:                  # from _energies: every matrix of the group
                vectors, row = g.vectors, list(range(len(g.idx)))
            else:
                vectors, row = (torch.linalg.eigh(g.gram[chosen])[1] if chosen else None), chosen
            for j, i in enumerate(g.idx):
                k = ranks[i]
                if k == 0:
                    out[i] = (g.batch.new_zeros(m, 0), g.batch.new_zeros(n, 0))
                    continue
                basis = vectors[row.index(j)][:, -k:].flip(-1)              # top k, descending
                mat = g.batch[j]
                out[i] = (basis, mat.mT @ basis) if m <= n else (mat @ basis, basis)
        return out

    @staticmethod
    def _decode(payload: Payload) -> dict[str, torch.Tensor]:
        return decode_factored(payload)
