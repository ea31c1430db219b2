"""The replicated state of one on-policy process: adapter tensors in a fixed order, the
optimizer over them, their checksum, and the two wire formats that carry whole states.

Invariants:
- Every process lists the adapter's trainable tensors in the model's own module order
  (``named_parameters``), so the learner and the workers agree on names, order and shapes.
- ``checksum`` is SHA-256 over (name, dtype, shape, raw bytes) of every adapter tensor and then
  of every optimizer-state tensor (per parameter, keys sorted). Equal checksums mean
  bit-identical states; the hyperparameters are not hashed (both sides build them from the
  same config).
- ``pack_flat`` is the full-sync wire format: a 20-byte header, the tensors' raw bytes in the
  wire dtype, in order, and a CRC32 trailer (harness.wire.sealed): FLAT_OVERHEAD = 24 bytes.
  Names and shapes are not shipped: the receiver checks the element count against its own
  tensors.
- ``pack_state`` is the resync format: fp32 adapter and the optimizer's ``state_dict``
  (torch.save) with a CRC32 trailer.
- Both are checked whole before anything is applied: a damaged payload is a SyncError.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import torch
from torch import Tensor, nn

from harness import optim
from harness.digest import raw_bytes as _raw, state_checksum
from harness.wire.sealed import CRC_NBYTES, seal, unseal

WIRE_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16,
                                       "fp32": torch.float32}
_MAGIC = b"NBFS"
_HEADER = struct.Struct("<4sBBHQI")  # magic, version, dtype code, reserved, elements, tensors
_DTYPE_CODES = {torch.bfloat16: 1, torch.float16: 2, torch.float32: 3}
FLAT_OVERHEAD = _HEADER.size + CRC_NBYTES   # bytes of a full-sync payload besides the numbers


class SyncError(ValueError):
    """A payload or a state that does not fit this replica (wrong size, format or kind)."""


@dataclass
class Replica:
    """One process's copy of what is trained: the adapter tensors (fp32, in model order) and,
    where the method replays steps (hilo, and always on the learner), the optimizer."""
    params: dict[str, nn.Parameter]
    optimizer: Any = None          # harness.optim.FlatOptimizer (make_optimizer) or a torch optimizer

    def tensors(self) -> list[Tensor]:
        return list(self.params.values())

    def checksum(self) -> str:
        return checksum(self.params, self.optimizer)


def adapter_params(model: nn.Module) -> dict[str, nn.Parameter]:
    """The trainable (adapter) parameters of ``model`` in module order; fails if none."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if not params:
        raise SyncError("model has no trainable parameters: expected a LoRA adapter")
    return params


def wire_dtype(name: str, key: str = "method.sync_dtype") -> torch.dtype:
    if name not in WIRE_DTYPES:
        raise SyncError(f"{key}: {name!r} is not a wire dtype; use one of {', '.join(WIRE_DTYPES)}")
    return WIRE_DTYPES[name]


def make_optimizer(params: Mapping[str, nn.Parameter], name: str = "adamw", lr: float = 1e-3,
                   weight_decay: float = 0.0) -> optim.FlatOptimizer:
    """The optimizer every replica builds the same way: harness.optim.make_optimizer stepped
    over one flat buffer (harness.optim.FlatOptimizer: the per-tensor arithmetic bit for bit, a
    kernel per operation instead of one per tensor; the adapter tensors become views into that
    buffer). An unknown name is a ConfigError naming onpolicy.optimizer."""
    return optim.FlatOptimizer(params.values(), lambda flat: optim.make_optimizer(flat, name, lr, weight_decay))


def optimizer_tensors(params: Mapping[str, Tensor],
                      optimizer: torch.optim.Optimizer | None) -> Iterator[tuple[str, Tensor]]:
    """(label, tensor) of every optimizer-state tensor, per parameter in order, keys sorted."""
    if optimizer is None:
        return
    for name, p in params.items():
        state = optimizer.state.get(p, {})
        for key in sorted(state):
            value = state[key]
            if isinstance(value, Tensor):
                yield f"{name}/{key}", value
            else:
                yield f"{name}/{key}", torch.tensor(float(value), dtype=torch.float64)


def checksum(params: Mapping[str, Tensor], optimizer: torch.optim.Optimizer | None = None) -> str:
    """Hex SHA-256 of the adapter tensors and then the optimizer state (see module docstring)."""
    return state_checksum(list(params.items()) + list(optimizer_tensors(params, optimizer)))


def pack_flat(tensors: list[Tensor], dtype: torch.dtype) -> bytes:
    """The tensors cast to ``dtype``, concatenated in order, behind a 20-byte header, CRC32 last."""
    flat = torch.cat([t.detach().reshape(-1).to(dtype) for t in tensors]) if tensors else \
        torch.empty(0, dtype=dtype)
    header = _HEADER.pack(_MAGIC, 1, _DTYPE_CODES[dtype], 0, flat.numel(), len(tensors))
    return seal(header + bytes(_raw(flat)))


def unpack_flat(data: bytes, like: list[Tensor]) -> list[Tensor]:
    """Inverse of ``pack_flat``: tensors shaped like ``like`` (in the wire dtype)."""
    if len(data) < _HEADER.size:
        raise SyncError(f"full-sync payload: {len(data)} bytes is shorter than its header")
    magic, version, code, _, numel, count = _HEADER.unpack_from(data)
    codes = {v: k for k, v in _DTYPE_CODES.items()}
    if magic != _MAGIC or version != 1 or code not in codes:
        raise SyncError("full-sync payload: not a narrowband full-sync payload (bad header)")
    dtype = codes[code]
    want = sum(t.numel() for t in like)
    if count != len(like) or numel != want:
        raise SyncError(f"full-sync payload: {count} tensors / {numel} elements, this replica "
                        f"has {len(like)} / {want} (different adapter rank or targets?)")
    body_len = len(data) - _HEADER.size - CRC_NBYTES
    if body_len != numel * torch.tensor([], dtype=dtype).element_size():
        raise SyncError(f"full-sync payload: body of {body_len} bytes is truncated or padded")
    body = unseal(data, "full-sync payload", SyncError)[_HEADER.size:]
    flat = torch.frombuffer(bytearray(body), dtype=torch.uint8).view(dtype) if numel else \
        torch.empty(0, dtype=dtype)
    out, offset = [], 0
    for t in like:
        out.append(flat[offset:offset + t.numel()].view(t.shape))
        offset += t.numel()
    return out


def pack_state(params: Mapping[str, Tensor], optimizer: torch.optim.Optimizer | None) -> bytes:
    """Resync payload: the fp32 adapter (in order) and, if given, the optimizer's state_dict; CRC32 last."""
    blob: dict[str, Any] = {"params": [t.detach().to(torch.float32).cpu().clone() for t in params.values()]}
    if optimizer is not None:
        blob["optimizer"] = optimizer.state_dict()
    buf = io.BytesIO()
    torch.save(blob, buf)
    return seal(buf.getvalue())


def load_state(data: bytes, replica: Replica) -> None:
    """Overwrite ``replica`` with a ``pack_state`` payload (params, and optimizer if both have one)."""
    body = unseal(data, "resync payload", SyncError)     # torch.load checks no CRC of its own
    try:
        blob = torch.load(io.BytesIO(body), weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling error is a bad payload
        raise SyncError(f"resync payload: cannot be read ({type(err).__name__}: {err})") from None
    tensors = blob.get("params", [])
    if len(tensors) != len(replica.params):
        raise SyncError(f"resync payload: {len(tensors)} tensors, this replica has {len(replica.params)}")
    with torch.no_grad():
        for p, t in zip(replica.params.values(), tensors):
            if p.shape != t.shape:
                raise SyncError(f"resync payload: tensor of shape {tuple(t.shape)} for {tuple(p.shape)}")
            p.copy_(t)
    if replica.optimizer is not None:
        if "optimizer" not in blob:
            raise SyncError("resync payload: has no optimizer state, this replica replays steps")
        replica.optimizer.load_state_dict(blob["optimizer"])


def flip_bit(replica: Replica, target: str = "param", bit: int = 0) -> str:
    """Flip bit ``bit`` of the first element of the first adapter tensor (``param``) or of its
    Adam first moment (``exp_avg``). For fault-injection tests; returns what was flipped."""
    name, p = next(iter(replica.params.items()))
    if target == "param":
        t = p.data
    elif target == "exp_avg":
        state = replica.optimizer.state.get(p, {}) if replica.optimizer is not None else {}
        if "exp_avg" not in state:
            raise SyncError("onpolicy.fault_flip_target: 'exp_avg' needs a replica with Adam state "
                            "(method=hilo, after its first update)")
        t = state["exp_avg"]
    else:
        raise SyncError(f"onpolicy.fault_flip_target: {target!r} is not known; use param or exp_avg")
    as_int = t.view(-1).view(torch.int32)
    as_int[0] ^= (1 << bit)
    return f"{name}/{target}[0] bit {bit}"
