"""Low-rank factor pairs on the wire, shared by spar and powersgd.

A rank-k approximation of an m x n matrix is shipped as P (m x k) and Q (n x k), row-major,
and decoded as P @ Q.T in float32. Wire dtypes:
  * bf16 / fp16 / fp32: 2 sections (P, Q); a rank costs (m + n) * element size bytes.
  * int8: 3 sections (P, Q as int8, then 2k float32 scales: one per column of P, then of Q,
    i.e. one per singular vector, symmetric, max-abs / 127); a rank costs m + n + 8 bytes.

Decoding is a float32 matmul over the small inner dimension k; it gave identical bits with 1
and 2 threads (tested), so learner and workers decode the same gradient.
"""
from __future__ import annotations

import torch

from harness.compress.payload import DTYPES, PayloadError, bytes_to_tensor, tensor_to_bytes

KIND_FACTORS = 1
_SCALE = "fp32"


def nsections(dtype: str) -> int:
    return 3 if dtype == "int8" else 2


def rank_nbytes(m: int, n: int, dtype: str) -> int:
    """Bytes one more rank of an m x n factor pair costs."""
    if dtype == "int8":
        return m + n + 2 * 4
    return (m + n) * torch.empty((), dtype=DTYPES[dtype]).element_size()


def _quantize_columns(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = x.abs().amax(dim=0) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x / scale).clamp_(-127, 127).to(torch.int8)
    return q, scale


def encode_pair(p: torch.Tensor, q: torch.Tensor, dtype: str) -> list[bytes]:
    """Sections for P (m x k) and Q (n x k) in wire dtype `dtype`."""
    if dtype != "int8":
        return [tensor_to_bytes(p, dtype), tensor_to_bytes(q, dtype)]
    pq, ps = _quantize_columns(p.float())
    qq, qs = _quantize_columns(q.float())
    return [tensor_to_bytes(pq, "int8"), tensor_to_bytes(qq, "int8"),
            tensor_to_bytes(torch.cat([ps, qs]), _SCALE)]


def decode_pair(sections: list[bytes], m: int, n: int, k: int, dtype: str) -> torch.Tensor:
    """The m x n float32 matrix P @ Q.T from the sections of `encode_pair`."""
    if len(sections) != nsections(dtype):
        raise PayloadError(f"factor pair has {len(sections)} sections, expected {nsections(dtype)} for {dtype}")
    if k == 0:
        return torch.zeros(m, n)
    p = bytes_to_tensor(sections[0], dtype).float()
    q = bytes_to_tensor(sections[1], dtype).float()
    if p.numel() != m * k or q.numel() != n * k:
        raise PayloadError(f"factor sizes {p.numel()}, {q.numel()} do not match rank {k} of {m} x {n}")
    p, q = p.reshape(m, k), q.reshape(n, k)
    if dtype == "int8":
        scales = bytes_to_tensor(sections[2], _SCALE)
        if scales.numel() != 2 * k:
            raise PayloadError(f"int8 factors carry {scales.numel()} scales, expected {2 * k}")
        p = p * scales[:k]
        q = q * scales[k:]
    return p @ q.T
