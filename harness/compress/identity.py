"""identity: every tensor shipped dense (the full-sync baseline), and the dense helpers the
other compressors use for tensors they do not compress (1-D biases, scalars).

dtype fp32 reproduces the input bit for bit; bf16 (the default wire dtype) rounds to nearest.
The budget is accepted (the config always carries one) and ignored: identity is the reference
that every budget is a fraction of.
"""
from __future__ import annotations

import torch

from harness.compress.base import FLOAT_WIRE_DTYPES, BaseCompressor
from harness.compress.payload import DTYPES, Payload, Record, TensorEntry, bytes_to_tensor, tensor_to_bytes

KIND_DENSE = 0


def dense_nbytes(numel: int, dtype: str) -> int:
    """Data bytes of a dense tensor of `numel` elements in wire dtype `dtype`."""
    return numel * torch.empty((), dtype=DTYPES[dtype]).element_size()


def dense_record(t: torch.Tensor, dtype: str) -> Record:
    """One section: the tensor's elements in `dtype`, row-major."""
    return Record(KIND_DENSE, 0, [tensor_to_bytes(t, dtype)])


def dense_decode(record: Record, entry: TensorEntry, dtype: str) -> torch.Tensor:
    return bytes_to_tensor(record.sections[0], dtype, entry.shape).float()


class Identity(BaseCompressor):
    """Dense tensors in `dtype` (fp32 | bf16 | fp16)."""
    name = "identity"
    wire_id = 0
    lossy = False
    dtypes = FLOAT_WIRE_DTYPES

    def _encode(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry], step: int,
                budget: int | None) -> Payload:
        records = [dense_record(tensors[e.name], self.dtype) for e in entries]
        return self._payload(entries, records, step, {"dtype": self.dtype})

    @staticmethod
    def _decode(payload: Payload) -> dict[str, torch.Tensor]:
        dtype = payload.meta["dtype"]
        return {e.name: dense_decode(r, e, dtype) for e, r in zip(payload.entries, payload.records)}
