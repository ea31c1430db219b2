"""quant: b-bit scalar quantisation with per-block (or per-tensor) scales; QSGD option.

Codes of b bits (b in 8, 4, 2, 1), packed little-endian into bytes; one scale per block of
`block_size` elements (0: one per tensor) in the wire `dtype` (the scale dtype here: fp32,
bf16 or fp16). With `bits=None` the largest b whose payload fits the budget is used; b = 1
costs 1/16 of the bf16 bytes plus scales, so quant cannot reach budgets below ~6.3%.

  b >= 2: L = 2^(b-1) - 1 levels each side, s = max|x| of the block,
          code = round(x / s * L) (deterministic) or floor(x / s * L + u), u ~ U[0, 1) (QSGD
          stochastic rounding: unbiased), decoded x^ = code * s / L.
  b = 1:  signs; deterministic: s = mean|x| of the block (the L2-best sign scale);
          stochastic: s = max|x|, +s with probability (1 + x/s) / 2 (unbiased).
Uniform draws come from a generator seeded by (seed, step, tensor name).
"""
from __future__ import annotations

import math

import torch

from harness.compress.base import FLOAT_WIRE_DTYPES, BaseCompressor, CompressorError, generator
from harness.compress.identity import dense_nbytes
from harness.compress.payload import (DTYPES, Payload, PayloadError, Record, TensorEntry, bytes_to_tensor,
                                      header_nbytes, table_bytes, tensor_to_bytes)

KIND_QUANT = 3
BITS = (8, 4, 2, 1)


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """uint8 codes < 2^bits -> bytes, 8/bits codes per byte, first code in the low bits."""
    if bits == 8:
        return codes
    per = 8 // bits
    pad = (-codes.numel()) % per
    c = torch.cat([codes, codes.new_zeros(pad)]).reshape(-1, per).to(torch.int32)
    shifts = torch.arange(per, dtype=torch.int32) * bits
    return (c << shifts).sum(dim=1).to(torch.uint8)


def unpack(data: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    if bits == 8:
        return data[:count]
    per = 8 // bits
    shifts = torch.arange(per, dtype=torch.int32) * bits
    c = (data.to(torch.int32).unsqueeze(1) >> shifts) & ((1 << bits) - 1)
    return c.reshape(-1)[:count].to(torch.uint8)


class Quant(BaseCompressor):
    """b-bit quantiser; lower bits => fewer bytes, coarser values."""
    name = "quant"
    wire_id = 5
    dtypes = FLOAT_WIRE_DTYPES

    def __init__(self, *, budget: float | None = None, budget_bytes: int | None = None, dtype: str = "fp32",
                 seed: int = 0, bits: int | None = None, block_size: int = 256, stochastic: bool = False) -> None:
        if bits is not None and bits not in BITS:
            raise CompressorError(f"compressor.options.bits: {bits!r} is not allowed; choose one of "
                                  f"{', '.join(map(str, BITS))} (or null: fit the budget)")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 0:
            raise CompressorError(f"compressor.options.block_size: {block_size!r} must be an integer >= 0 "
                                  "(0: one scale per tensor)")
        self.bits = bits
        super().__init__(budget=budget, budget_bytes=budget_bytes, dtype=dtype, seed=seed)
        self.block_size = block_size
        self.stochastic = bool(stochastic)

    def _budget_optional(self) -> bool:
        return self.bits is not None

    def _blocks(self, numel: int) -> tuple[int, int]:
        """(block length, number of blocks) for a tensor of `numel` elements."""
        block = numel if self.block_size == 0 else min(self.block_size, numel)
        return block, math.ceil(numel / block)

    def _tensor_nbytes(self, numel: int, bits: int) -> int:
        return math.ceil(numel * bits / 8) + self._blocks(numel)[1] * dense_nbytes(1, self.dtype)

    def _fit_bits(self, entries: list[TensorEntry], fixed: int, budget: int | None) -> int:
        def size(b: int) -> int:
            return fixed + sum(self._tensor_nbytes(e.numel, b) for e in entries)

        if self.bits is not None:
            if budget is not None and size(self.bits) > budget:
                raise self._over_budget(size(self.bits), budget, f"{self.bits}-bit codes")
            return self.bits
        for b in BITS:
            if size(b) <= budget:
                return b
        dense = 2 * sum(e.numel for e in entries)
        raise CompressorError(f"compressor.budget: {budget} bytes ({budget / dense:.2%} of bf16) is below what "
                              f"quant can reach: 1-bit codes need {size(1)} bytes ({size(1) / dense:.2%}); raise "
                              "the budget or use spar, powersgd, topk or randk")

    def _encode(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry], step: int,
                budget: int | None) -> Payload:
        meta = {"dtype": self.dtype, "block_size": self.block_size, "stochastic": self.stochastic}
        fixed = header_nbytes(len(table_bytes(entries, meta)), [2] * len(entries))
        bits = self._fit_bits(entries, fixed, budget)
        records = [self._quantize(tensors[e.name].reshape(-1).cpu(), e.name, step, bits) for e in entries]
        return self._payload(entries, records, step, meta, bits=bits)

    def _quantize(self, x: torch.Tensor, name: str, step: int, bits: int) -> Record:
        block, nblocks = self._blocks(x.numel())
        pad = nblocks * block - x.numel()
        xb = torch.cat([x, x.new_zeros(pad)]).reshape(nblocks, block)
        u = None
        if self.stochastic:
            u = torch.rand(nblocks, block, generator=generator(self.seed, step, name, "qsgd"))
        if bits == 1 and not self.stochastic:
            counts = torch.full((nblocks,), float(block))
            counts[-1] = block - pad
            scale = xb.abs().sum(dim=1) / counts
        else:
            scale = xb.abs().amax(dim=1)
        scale = scale.to(DTYPES[self.dtype]).float()              # quantise against the shipped scale
        safe = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(1)
        if bits == 1:
            codes = (u < (xb / safe + 1) / 2) if self.stochastic else (xb >= 0)
        else:
            levels = (1 << (bits - 1)) - 1
            y = xb / safe * levels
            codes = torch.floor(y + u) if self.stochastic else torch.round(y)
            codes = codes.clamp_(-levels, levels) + levels
        codes = codes.reshape(-1)[:x.numel()].to(torch.uint8)
        return Record(KIND_QUANT, bits, [tensor_to_bytes(pack(codes, bits), "uint8"),
                                         tensor_to_bytes(scale, self.dtype)])

    @staticmethod
    def _decode(payload: Payload) -> dict[str, torch.Tensor]:
        out = {}
        block_size = payload.meta["block_size"]
        for e, r in zip(payload.entries, payload.records):
            bits = r.param
            if r.kind != KIND_QUANT or bits not in BITS or len(r.sections) != 2:
                raise PayloadError(f"quant: tensor {e.name!r} has an invalid record (kind {r.kind}, bits {bits})")
            block = e.numel if block_size == 0 else min(block_size, e.numel)
            nblocks = math.ceil(e.numel / block)
            data = bytes_to_tensor(r.sections[0], "uint8")
            scale = bytes_to_tensor(r.sections[1], payload.meta["dtype"]).float()
            if len(data) != math.ceil(e.numel * bits / 8) or len(scale) != nblocks:
                raise PayloadError(f"quant: tensor {e.name!r} sections do not match {e.numel} elements at {bits} bits")
            codes = unpack(data, bits, e.numel).float()
            codes = torch.cat([codes, codes.new_zeros(nblocks * block - e.numel)]).reshape(nblocks, block)
            if bits == 1:
                values = (2 * codes - 1) * scale.unsqueeze(1)
            else:
                levels = (1 << (bits - 1)) - 1
                values = (codes - levels) * (scale.unsqueeze(1) / levels)
            out[e.name] = values.reshape(-1)[:e.numel].reshape(e.shape)
        return out
