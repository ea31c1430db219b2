"""spar: spectral truncation with adaptive rank allocation under one byte budget.

Every matrix of the update (a tensor with ndim >= 2, viewed as shape[0] x rest) is replaced by
its top-k singular triplets, shipped as a factor pair P (m x k), Q (n x k) in the wire dtype
(see factors.py). The ranks k_i are chosen jointly for ALL matrices so that the spectral energy
kept is maximal under the budget (allocate.py: greedy by sigma^2 per byte with tail fill, or the
exact DP); matrices with little energy get rank 0. Tensors with ndim < 2 (biases, scalars) are
shipped dense (bf16, or the wire dtype when it is a float type) and counted first.

Byte accounting: budget >= header + dense tensors + sum_i k_i * rank_nbytes(m_i, n_i); the header
(payload.py) does not depend on the ranks, so it is known before allocation.

Spectra of thin LoRA gradients (A-grad r x d_in, B-grad d_out x r, r << d) come from the small
Gram matrix G (M M^T if m <= n else M^T M, r x r) of every matrix, batched by shape, and the
factors take the projection form on k columns: for m <= n, P = U_k and Q = M^T U_k, so that
P Q^T = U_k U_k^T M; for m > n, P = M V_k and Q = V_k (no division by sigma, so tiny singular
values cost no accuracy; the best rank-k approximation for the directions found).
- ``svd="sketch"`` (default): ``sketch_columns`` (q = 12) directions of G by randomized
  subspace iteration (``sketch_power`` = 3 products with G, then Rayleigh-Ritz on q x q), all
  Gram matrices of one size in one batch; the allocation sees the top ceil(q/2) = 6 (the rest
  is oversampling); a matrix allocated all 6 gets an exact ``eigh`` and the allocation is
  redone. The energies are Ritz values: what the shipped directions keep. Same err_1 / err_ef
  as ``gram`` within 0.3% on real LoRA gradients at 0.5-10% budgets, about 2x faster on the
  tiny model (docs/compress.md, "Encode speed").
- ``svd="gram"``: ``eigvalsh`` of every G for the allocation, then ``eigh`` (batched) only for
  the matrices that got rank > 0 (one ``eigh`` per shape where the budget buys rank 1
  everywhere). Measured on a 2-core CPU (batch of 8, fp32): 64x256 gram+eigh 2.2 ms vs
  torch.linalg.svd(full_matrices=False) 14 ms; 64x4096 4.2 vs 70 ms.
- ``svd="svd"``: torch.linalg.svd, the reference (``python -m harness.commands.compress_bench`` times it).

Allocation (``allocation``, what the greedy maximises per byte; the bytes and the decoder are the
same for all three: a worker decodes the same factor pairs whichever chose the ranks):
- ``energy`` (default, the paper's): sigma_ij^2, the squared singular values. Minimises the total
  squared error sum_i ||M_i - M^_i||_F^2 of the gradient.
- ``normalized``: sigma_ij^2 / ||M_i||_F^2 (allocate.normalized_gains). Minimises the sum of the
  matrices' relative squared errors, so a matrix with little energy (LoRA's A gradients: 3.5-16%
  of B's) is worth as much as one with much.
- ``preconditioned``: the energy of the Adam step each triplet would cause. With D_i the
  elementwise preconditioner 1 / (sqrt(v^_i) + eps) of matrix i, the gain of triplet j is
  ||D_i * T_ij||_F^2, T_ij = u_j u_j^T M_i (m <= n) or M_i v_j v_j^T (m > n): the rank-1 piece
  the projection form ships, so rank k ships T_i1 + ... + T_ik exactly (before wire rounding).
  Computed as sum_ab D_ab^2 P_aj^2 Q_bj^2 for the factor columns P_j, Q_j (m n k per matrix).
  v^_i = (beta2 v_i + (1 - beta2) x_i^2) / (1 - beta2^(t+1)): Adam's bias-corrected second
  moment AFTER this step if the step's gradient were x_i, the tensor being encoded (g + e under
  error feedback), from the optimizer state ``provide_preconditioner`` handed over (v_i, t
  steps so far, beta2, eps: the learner's replicated Adam state); without one, v = 0 and t = 0
  (the first step's preconditioner, 1 / (|x| + eps)). The pieces are not D-orthogonal, so the
  gains are per-triplet scores, not an exact decomposition; they need not fall with j and are
  made non-increasing by pool-adjacent-violators (allocate.pooled). Beyond the paper: an
  ablation (docs/compress.md, "Allocation").

info: ranks {name: k} (per step: the report's rank heatmap), energy_kept (fraction of the
squared norm of the matrices kept before rounding), dense (number of tensors shipped dense).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from harness.compress import factors
from harness.compress.allocate import allocate_exact, allocate_greedy, normalized_gains, pooled
from harness.compress.base import WIRE_DTYPES, BaseCompressor, CompressorError, check_choice, generator
from harness.compress.identity import KIND_DENSE, dense_decode, dense_nbytes, dense_record
from harness.compress.payload import Payload, PayloadError, Record, TensorEntry, header_nbytes, table_bytes

ALLOCATORS = ("greedy", "exact")
ALLOCATIONS = ("energy", "normalized", "preconditioned")


@dataclass
class _Group:
    """Matrices of one shape: their indices, the batch (b, m, n), its Gram matrices (b, r, r)
    (gram and sketch paths), and on the svd path the bases ``spectra`` returned; ``vectors``:
    eigenvectors of the Gram matrices (ascending; all r, or the sketch's q) when ``_energies``
    computed them for every matrix; ``exact``: False while the group's spectra are sketched."""
    idx: list[int]
    batch: torch.Tensor
    gram: torch.Tensor | None
    left: torch.Tensor | None = None
    right: torch.Tensor | None = None
    vectors: torch.Tensor | None = None
    exact: bool = True


SVD_METHODS = ("sketch", "gram", "svd")


def matrix_shape(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(m, n) for a tensor compressed as a matrix, None for one shipped dense."""
    if len(shape) < 2:
        return None
    return shape[0], math.prod(shape[1:])


def cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The small r x r product (r = min(m, n)) of m x n matrices a and b (or batches of them):
    A B^T if m <= n, else A^T B. ``cross(a, a)`` is a's Gram matrix; harness.onpolicy.overlap
    builds a sum's Gram matrix from such products."""
    m, n = a.shape[-2:]
    return a @ b.mT if m <= n else a.mT @ b


def _gram(batch: torch.Tensor) -> torch.Tensor:
    """The small Gram matrices (b, r, r) of a batch of m x n matrices: M M^T if m <= n, else M^T M."""
    return cross(batch, batch)


def _eigh(gram: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Energies (b, r) of symmetric PSD matrices, descending and clamped at 0, and their
    eigenvectors in ``eigh``'s ascending order (``_factors`` takes the last k)."""
    lam, vectors = torch.linalg.eigh(gram)
    return lam.flip(-1).clamp_min(0), vectors


def spectra(mats: torch.Tensor, method: str = "gram") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Energies (b, r) in descending order and bases for a batch of m x n matrices (b, m, n).

    Returns (energy, left, right) such that the best rank-k approximation of mats[i] is
    left[i, :, :k] @ right[i, :, :k].T, r = min(m, n).
    """
    m, n = mats.shape[-2:]
    if method == "svd":
        u, s, vh = torch.linalg.svd(mats, full_matrices=False)
        return s.square(), u * s.unsqueeze(-2), vh.mT
    lam, vec = _eigh(_gram(mats))
    vec = vec.flip(-1)                                       # descending, like the energies
    return (lam, vec, mats.mT @ vec) if m <= n else (lam, mats @ vec, vec)


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
    wire_id = 1
    dtypes = WIRE_DTYPES

    def __init__(self, *, budget: float | None = None, budget_bytes: int | None = None, dtype: str = "bf16",
                 seed: int = 0, allocator: str = "greedy", svd: str = "sketch", sketch_columns: int = 12,
                 sketch_power: int = 3, backward_grams: bool = False, allocation: str = "energy") -> None:
        super().__init__(budget=budget, budget_bytes=budget_bytes, dtype=dtype, seed=seed)
        self.allocator = check_choice("compressor.options.allocator", allocator, ALLOCATORS)
        self.allocation = check_choice("compressor.options.allocation", allocation, ALLOCATIONS)
        self._moments: tuple[dict[str, torch.Tensor], int, float, float] | None = None
        self.svd = check_choice("compressor.options.svd", svd, SVD_METHODS)
        for key, value, low in (("sketch_columns", sketch_columns, 1), ("sketch_power", sketch_power, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise CompressorError(f"compressor.options.{key}: {value!r} is not allowed; "
                                      f"an integer >= {low}")
        self.sketch_columns, self.sketch_power = sketch_columns, sketch_power
        if not isinstance(backward_grams, bool):
            raise CompressorError(f"compressor.options.backward_grams: {backward_grams!r} is not allowed; "
                                  "true or false")
        if backward_grams and self.svd == "svd":
            raise CompressorError("compressor.options.backward_grams: True is not allowed with svd=svd "
                                  "(it uses no Gram matrices); true or false")
        # read by the hilo learner (harness.onpolicy.overlap): it computes the Gram matrices of what
        # it will encode while backward runs and hands them over with provide_grams()
        self.backward_grams = backward_grams
        self._given: dict[str, torch.Tensor] = {}
        self.dense_dtype = dtype if dtype != "int8" else "bf16"

    def provide_grams(self, grams: dict[str, torch.Tensor]) -> None:
        """The Gram matrices (``_gram``'s orientation: r x r, r = min(m, n)) of the next encode's
        matrices, by tensor name, computed elsewhere (the hilo learner's backward). Used by the next
        encode only, for every shape group whose matrices all have one; the rest are computed there."""
        self._given = dict(grams)

    def provide_preconditioner(self, second_moment: dict[str, torch.Tensor], steps: int, beta2: float,
                               eps: float) -> None:
        """Adam's state for the next encode's ``preconditioned`` allocation (ignored by the others):
        the second moment v (exp_avg_sq) per tensor name, shaped like the tensor, after ``steps``
        optimizer steps, and the optimizer's beta2 and eps. Used by the next encode only; a tensor
        without one gets v = 0."""
        self._moments = ({n: v for n, v in second_moment.items()}, int(steps), float(beta2), float(eps))

    def _precondition(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry],
                      matrices: list[int]) -> dict[int, torch.Tensor]:
        """Per matrix index: D^2 = 1 / (sqrt(v^) + eps)^2 as an m x n matrix (module doc, "Allocation")."""
        moments, self._moments = self._moments, None
        second, steps, beta2, eps = moments if moments is not None else ({}, 0, 0.999, 1e-8)
        correction = 1.0 - beta2 ** (steps + 1)
        out = {}
        for i in matrices:
            name = entries[i].name
            x = tensors[name].reshape(matrix_shape(entries[i].shape)).double()
            v = (1.0 - beta2) * x.square()
            if name in second:
                v = v + beta2 * second[name].reshape(x.shape).to(x)
            out[i] = (v / correction).sqrt().add_(eps).reciprocal_().square_()
        return out

    def _encode(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry], step: int,
                budget: int | None) -> Payload:
        meta = {"dtype": self.dtype, "dense_dtype": self.dense_dtype}
        shapes, fixed = layout(entries, meta, self.dtype, self.dense_dtype)
        if fixed > budget:
            raise self._over_budget(fixed, budget, f"the header and {sum(s is None for s in shapes)} dense tensors")

        matrices = [i for i, s in enumerate(shapes) if s]
        groups = self._groups(tensors, entries, matrices)
        costs = dict(zip(matrices, (factors.rank_nbytes(*shapes[i], self.dtype) for i in matrices)))
        # Where the budget buys rank 1 for every matrix (LLM proportions), nearly every matrix needs
        # its eigenvectors anyway: one eigh per group then gives values and vectors at once. Below
        # that (the tiny model at 1.6%), eigenvalues for all and vectors only where rank > 0.
        weights = self._precondition(tensors, entries, matrices) if self.allocation == "preconditioned" else None
        energy, total = self._energies(groups, step, vectors=weights is not None or budget - fixed >= sum(costs.values()))
        ranks = self._allocate(groups, energy, costs, budget - fixed, total, weights)
        pairs = self._factors(groups, ranks)                     # bases only where rank > 0

        records = []
        for i, e in enumerate(entries):
            if shapes[i] is None:
                records.append(dense_record(tensors[e.name], self.dense_dtype))
                continue
            left, right = pairs[i]
            records.append(Record(factors.KIND_FACTORS, ranks[i], factors.encode_pair(left, right, self.dtype)))
        total = sum(total.values())
        kept = sum(float(energy[i][:ranks[i]].sum()) for i in matrices)
        return self._payload(entries, records, step, meta,
                             ranks={entries[i].name: ranks[i] for i in matrices},
                             energy_kept=kept / total if total > 0 else 1.0,
                             dense=len(entries) - len(matrices))

    def _groups(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry],
                matrices: list[int]) -> list[_Group]:
        """The matrices batched by shape, with their small Gram matrices (gram and sketch methods)."""
        by_shape: dict[tuple[int, int], list[int]] = {}
        for i in matrices:
            by_shape.setdefault(matrix_shape(entries[i].shape), []).append(i)
        groups, given, self._given = [], self._given, {}
        for (m, n), idx in by_shape.items():
            batch = torch.stack([tensors[entries[i].name].reshape(m, n) for i in idx])
            sketched = self.svd == "sketch" and self.sketch_columns < min(m, n)
            if self.svd == "svd":
                gram = None
            elif all(entries[i].name in given for i in idx):
                bad = [entries[i].name for i in idx if tuple(given[entries[i].name].shape) != (min(m, n),) * 2]
                if bad:
                    raise CompressorError(f"spar.provide_grams: {bad[0]} has a Gram matrix of shape "
                                          f"{tuple(given[bad[0]].shape)}, not {(min(m, n),) * 2}")
                gram = torch.stack([given[entries[i].name] for i in idx]).to(batch)
            else:
                gram = _gram(batch)
            groups.append(_Group(idx, batch, gram, exact=not sketched))
        return groups

    def _energies(self, groups: list[_Group], step: int, vectors: bool = False
                  ) -> tuple[dict[int, np.ndarray], dict[int, float]]:
        """Per matrix index: its spectral energies (squared singular values), descending, float64,
        and its total energy (squared Frobenius norm).

        gram: ``eigvalsh`` of the Gram matrix, no eigenvectors (several times cheaper than
        ``eigh``; only the few matrices that get a rank need vectors, see ``_factors``); with
        ``vectors``, one ``eigh`` whose vectors ``_factors`` reuses.
        svd: the reference path, whose bases are kept for ``_factors``.
        sketch: the top ceil(``sketch_columns`` / 2) energies from randomized subspace iteration
        on the Gram matrices (``_sketch``, one batch per Gram size across shapes), with the
        sketch's vectors; groups whose matrices are no wider than ``sketch_columns`` take the
        gram path.
        """
        energy, total = {}, {}
        sketched: dict[int, list[_Group]] = {}          # by Gram size: one batch for every shape
        for g in groups:
            if not g.exact:
                sketched.setdefault(g.gram.shape[-1], []).append(g)
        for r, gs in sketched.items():
            e, t, vectors = self._sketch(torch.cat([g.gram for g in gs]), step)
            # the allocation sees the top ceil(q/2) Ritz values; the rest of the sketch is
            # oversampling, which makes those accurate (Halko et al.: 5-10 extra directions)
            trusted = self.sketch_columns - self.sketch_columns // 2
            values, sums, start = e[:, :trusted].double().cpu().numpy(), t.double().cpu().tolist(), 0
            for g in gs:
                g.vectors = vectors[start:start + len(g.idx)]
                for i in g.idx:
                    energy[i], total[i] = values[start], sums[start]
                    start += 1
        for g in (g for g in groups if g.exact):
            if g.gram is None:
                e, g.left, g.right = spectra(g.batch, "svd")
            elif vectors:
                e, g.vectors = _eigh(g.gram)
            else:
                e = torch.linalg.eigvalsh(g.gram).flip(-1).clamp_min(0)
            values, sums = e.double().cpu().numpy(), e.double().sum(-1).tolist()
            for j, i in enumerate(g.idx):
                energy[i], total[i] = values[j], sums[j]
        return energy, total

    def _sketch(self, gram: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Randomized subspace iteration (Halko, Martinsson & Tropp 2011, algorithms 4.3 and 5.3)
        on a batch of small Gram matrices G (b, r, r), every shape with that r at once: Y =
        G^(p+1) Omega with a seeded Gaussian Omega (r x q, one per r and step), G scaled by its
        trace so that the powers stay in range, U = orth(Y), then the exact spectrum of U^T G U
        (q x q, ``eigh``). Returns (energies (b, q) descending, totals (b,), vectors (b, r, q)
        ascending like ``eigh``'s). The energies are the Ritz values: exactly what keeping the
        top k of the vectors keeps (the projection form), never more than the true top k; the
        totals are the traces (squared Frobenius norms). Each product costs r^2 q per matrix,
        not a pass over the matrices: what is left of the cost is the Gram products. Without
        re-orthonormalization between the products the directions whose energy is below
        ~(1e-7)^(1/(p+1)) of the top one blur; they are never worth a byte at these budgets.
        The sketch is kept as q rows on the left (Y^T = Omega^T G^(p+1)): MKL on this CPU runs
        (r x r) @ (r x 8) about 2.5x slower than the same product as (8 x r) @ (r x r)."""
        q, r = self.sketch_columns, gram.shape[-1]
        gen = generator(self.seed, step, f"{r}", "spar.sketch")
        trace = gram.diagonal(dim1=-2, dim2=-1).sum(-1)
        scaled = gram / trace.clamp_min(torch.finfo(gram.dtype).tiny)[:, None, None]
        rows = torch.randn(q, r, generator=gen).to(gram) @ scaled      # (b, q, r): Y^T, G symmetric
        for _ in range(self.sketch_power):
            rows = rows @ scaled
        basis = torch.linalg.qr(rows.mT).Q                            # (b, r, q), orthonormal
        e, w = _eigh((basis.mT @ gram) @ basis)
        return e, trace, basis @ w

    def _gains(self, groups: list[_Group], energy: dict[int, np.ndarray], total: dict[int, float],
               weights: dict[int, torch.Tensor] | None) -> dict[int, np.ndarray]:
        """What the allocator maximises per matrix index (module doc, "Allocation"): the energies
        themselves (``energy``), as fractions of the matrix's norm (``normalized``), or the
        preconditioned energies of the rank-1 pieces, pooled to be non-increasing."""
        if self.allocation == "energy":
            return energy
        if self.allocation == "normalized":
            return {i: normalized_gains(e, total[i]) for i, e in energy.items()}
        gains = {}
        for g in groups:
            m, n = g.batch.shape[-2:]
            for j, i in enumerate(g.idx):
                k = len(energy[i])
                if g.gram is None:                               # svd path: left = U S, right = V
                    left, right = g.left[j][:, :k], g.right[j][:, :k]
                else:
                    basis = g.vectors[j][:, -k:].flip(-1) if k else g.vectors[j][:, :0]
                    mat = g.batch[j]
                    left, right = (basis, mat.mT @ basis) if m <= n else (mat @ basis, basis)
                left, right = left.double().square(), right.double().square()
                score = (left * (weights[i] @ right)).sum(0)     # sum_ab D_ab^2 P_aj^2 Q_bj^2 per column j
                gains[i] = pooled(score.cpu().numpy())
        return gains

    def _allocate(self, groups: list[_Group], energy: dict[int, np.ndarray], costs: dict[int, int],
                  room: int, total: dict[int, float] | None = None,
                  weights: dict[int, torch.Tensor] | None = None) -> dict[int, int]:
        """Ranks per matrix index under ``room`` bytes, maximising ``_gains``. A sketched matrix
        allocated every direction the allocation was shown may deserve more: it moves to an exact
        group of its own (gram ``eigh``) and the allocation is redone, until no sketched matrix is
        saturated."""
        allocate = allocate_exact if self.allocator == "exact" else allocate_greedy
        while True:
            order = list(costs)
            gains = self._gains(groups, energy, total, weights)
            ranks = dict(zip(order, allocate([gains[i] for i in order], [costs[i] for i in order], room)))
            moved = False
            for g in [g for g in groups if not g.exact]:
                full = [j for j, i in enumerate(g.idx) if ranks[i] >= len(energy[i])]
                if not full:
                    continue
                rest = [j for j in range(len(g.idx)) if j not in full]
                gram = g.gram[full]
                e, vectors = _eigh(gram)
                values = e.double().cpu().numpy()
                for k, j in enumerate(full):
                    energy[g.idx[j]] = values[k]
                groups.append(_Group([g.idx[j] for j in full], g.batch[full], gram, vectors=vectors))
                g.idx, g.batch, g.gram, g.vectors = ([g.idx[j] for j in rest], g.batch[rest],
                                                     g.gram[rest], g.vectors[rest])
                moved = True
            if not moved:
                return ranks

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
