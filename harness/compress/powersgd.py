"""powersgd: rank-k power iteration with warm start (Vogels et al. 2019), one rank for all matrices.

Per matrix M (shape[0] x rest), the same math as torch's
torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook with world size 1:

    Q <- orthogonalize(Q_prev)       Q_prev: this tensor's Q from the previous step (warm start),
                                     or N(0, 1) from (seed, step, tensor name) the first time
    P <- orthogonalize(M Q)          (QR; the hook uses Gram-Schmidt for k <= 2: same span)
    Q <- M^T P                       kept as the next step's warm start
    ship P (m x k), Q (n x k);   decode M^ = P Q^T = P P^T M

Error feedback is the ErrorFeedback wrapper (build(..., error_feedback=True)), as in the hook.
The rank is the largest k whose payload fits the budget (matrices smaller than k use their
full min(m, n)), or a fixed `rank` option (then the budget, if given, must hold it). Below the
cost of rank 1 everywhere, a rotating subset of matrices gets rank 1 (see `_fit_ranks`).
Tensors with ndim < 2 are shipped dense. The warm-start state lives in the encoder only;
decoding is stateless. Higher rank => better reconstruction, more bytes.
"""
from __future__ import annotations

import torch

from harness.compress import factors
from harness.compress.base import FLOAT_WIRE_DTYPES, BaseCompressor, CompressorError, generator
from harness.compress.identity import dense_record
from harness.compress.payload import Payload, Record, TensorEntry
from harness.compress.spar import decode_factored, layout


def orthogonalize(x: torch.Tensor) -> torch.Tensor:
    """Orthonormal columns spanning x's columns (m x k, k <= m), by reduced QR."""
    return torch.linalg.qr(x, mode="reduced").Q


class PowerSGD(BaseCompressor):
    """Rank-k power iteration compressor with per-tensor warm start."""
    name = "powersgd"
    wire_id = 2
    dtypes = FLOAT_WIRE_DTYPES + ("int8",)

    def __init__(self, *, budget: float | None = None, budget_bytes: int | None = None, dtype: str = "bf16",
                 seed: int = 0, rank: int | None = None, warm_start: bool = True) -> None:
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 1):
            raise CompressorError(f"compressor.options.rank: {rank!r} must be an integer >= 1 (or null: fit "
                                  "the budget)")
        self.rank = rank
        super().__init__(budget=budget, budget_bytes=budget_bytes, dtype=dtype, seed=seed)
        self.warm_start = bool(warm_start)
        self.q_memory: dict[str, torch.Tensor] = {}   # tensor name -> Q (n x k) of the last step

    def _budget_optional(self) -> bool:
        return self.rank is not None

    def _fit_ranks(self, shapes: list, fixed: int, budget: int | None, step: int) -> list[int]:
        """Rank per tensor (0 for dense ones): one rank k for every matrix, the largest that fits.

        When even rank 1 for every matrix does not fit, matrices get rank 1 in a rotating order
        (starting at matrix `step mod count`) while it fits, the rest rank 0 (error feedback
        carries them to a later step): a uniform, non-adaptive share of the budget.
        """
        def cost(k: int) -> int:
            return sum(min(k, *s) * factors.rank_nbytes(*s, self.dtype) for s in shapes if s)

        def uniform(k: int) -> list[int]:
            return [min(k, *s) if s else 0 for s in shapes]

        if budget is not None and fixed > budget:
            raise self._over_budget(fixed, budget, "the header and the dense tensors")
        if self.rank is not None:
            if budget is not None and fixed + cost(self.rank) > budget:
                raise self._over_budget(fixed + cost(self.rank), budget, f"rank {self.rank}")
            return uniform(self.rank)
        if fixed + cost(1) <= budget:
            k, top = 1, max(min(s) for s in shapes if s)
            while k < top and fixed + cost(k + 1) <= budget:
                k += 1
            return uniform(k)
        matrices = [i for i, s in enumerate(shapes) if s]
        ranks, left = [0] * len(shapes), budget - fixed
        start = step % len(matrices)
        for i in matrices[start:] + matrices[:start]:
            c = factors.rank_nbytes(*shapes[i], self.dtype)
            if c <= left:
                ranks[i], left = 1, left - c
        return ranks

    def _encode(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry], step: int,
                budget: int | None) -> Payload:
        meta = {"dtype": self.dtype, "dense_dtype": self.dense_dtype}
        shapes, fixed = layout(entries, meta, self.dtype, self.dense_dtype)
        if not any(shapes):
            raise CompressorError("powersgd.encode: no tensor has ndim >= 2; nothing to compress (use identity)")
        ranks = self._fit_ranks(shapes, fixed, budget, step)
        records = []
        for e, s, k in zip(entries, shapes, ranks):
            if s is None:
                records.append(dense_record(tensors[e.name], self.dense_dtype))
                continue
            p, q = self._power_step(e.name, tensors[e.name].reshape(s), k, step) if k else (None, None)
            sections = factors.encode_pair(p, q, self.dtype) if k else [b""] * factors.nsections(self.dtype)
            records.append(Record(factors.KIND_FACTORS, k, sections))
        return self._payload(entries, records, step, meta, rank=max(ranks),
                             ranks={e.name: k for e, s, k in zip(entries, shapes, ranks) if s})

    def _power_step(self, name: str, m: torch.Tensor, k: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.q_memory.get(name) if self.warm_start else None
        if q is None or q.shape != (m.shape[1], k):
            g = generator(self.seed, step, name, "powersgd-init")
            q = torch.randn(m.shape[1], k, generator=g).to(m.device)
        q = orthogonalize(q.to(m.device, torch.float32))
        p = orthogonalize(m @ q)
        q = m.T @ p
        self.q_memory[name] = q
        return p, q

    @property
    def dense_dtype(self) -> str:
        return self.dtype if self.dtype != "int8" else "bf16"

    @staticmethod
    def _decode(payload: Payload) -> dict[str, torch.Tensor]:
        return decode_factored(payload)
