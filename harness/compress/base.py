"""The Compressor protocol and what every compressor shares: budgets, input checks, seeds.

Budget convention (all compressors): `budget` is a fraction of the bf16 bytes of the tensors
handed to `encode` (2 bytes x elements), 0 < budget <= 1; `budget_bytes` is absolute and wins
when both are set. The budget covers the WHOLE payload, header and checksum included, because
all of it goes on the wire: `payload.nbytes <= info["budget_bytes"]` for every lossy compressor.

Determinism: any randomness is drawn from a torch.Generator seeded by `harness.seeds.derive(seed, step,
name, purpose)` (a hash, stable across processes and Python's hash salting). Decoding is
stateless: everything a decoder needs (seed, step, options) is in the payload.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from harness.compress.payload import Payload, PayloadError, TensorEntry, dtype_name, register_wire_id
from harness.seeds import derive

FLOAT_WIRE_DTYPES = ("bf16", "fp16", "fp32")
WIRE_DTYPES = ("bf16", "fp16", "int8", "fp32")


class CompressorError(ValueError):
    """Bad compressor arguments or input; the message names the key, the value and what is allowed."""


@runtime_checkable
class Compressor(Protocol):
    name: str

    def encode(self, tensors: dict[str, torch.Tensor], step: int = 0) -> Payload: ...

    def decode(self, payload: Payload) -> dict[str, torch.Tensor]: ...


def generator(seed: int, step: int, name: str, purpose: str = "") -> torch.Generator:
    """A CPU generator for one (seed, step, tensor, purpose) stream."""
    g = torch.Generator(device="cpu")
    g.manual_seed(derive(seed, step, name, purpose))
    return g


def check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise CompressorError(f"{key}: {value!r} is not allowed; choose one of {', '.join(allowed)}")
    return value


def resolve_budget(budget: float | None, budget_bytes: int | None, numel: int) -> int | None:
    """Budget in bytes for `numel` elements: budget_bytes if set, else floor(budget * 2 * numel)."""
    if budget_bytes is not None:
        return int(budget_bytes)
    if budget is not None:
        return int(math.floor(float(budget) * 2 * numel))
    return None


class BaseCompressor:
    """Shared constructor and encode/decode plumbing; subclasses implement `_encode`/`_decode`.

    Subclasses receive float32 tensors on their original device (`_encode`) and return float32
    CPU tensors with the original shapes (`_decode`).
    """
    name: ClassVar[str] = ""               # the config group's name (conf/compressor/<name>.yaml)
    wire_id: ClassVar[int | None] = None   # the payload preamble's compressor byte: unique, never reused
    lossy: ClassVar[bool] = True
    dtypes: ClassVar[tuple[str, ...]] = WIRE_DTYPES

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that names itself registers its wire id (harness.compress.payload.register_wire_id);
        a named class without one, or with another's, fails at its definition (class creation)."""
        super().__init_subclass__(**kwargs)
        if isinstance(cls.__dict__.get("name"), str) and cls.__dict__["name"]:
            if "wire_id" not in cls.__dict__:
                raise TypeError(f"{cls.__module__}.{cls.__qualname__}: a compressor declares its wire id "
                                f"(wire_id = <an integer 0..255 no other compressor uses>) beside name = {cls.name!r}")
            register_wire_id(cls.name, cls.wire_id, f"{cls.__module__}.{cls.__qualname__}")

    def __init__(self, *, budget: float | None = None, budget_bytes: int | None = None,
                 dtype: str = "bf16", seed: int = 0) -> None:
        if budget is not None:
            if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not (0 < budget <= 1):
                raise CompressorError(f"compressor.budget: {budget!r} is outside (0, 1]; it is a fraction of "
                                      "the bf16 bytes of the encoded tensors, e.g. 0.016")
        if budget_bytes is not None:
            if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
                raise CompressorError(f"compressor.budget_bytes: {budget_bytes!r} must be a positive "
                                      "integer number of bytes")
        if self.lossy and budget is None and budget_bytes is None and not self._budget_optional():
            raise CompressorError(f"compressor.budget: None; {self.name} needs a budget: set "
                                  "compressor.budget (fraction in (0, 1]) or compressor.budget_bytes")
        if isinstance(seed, bool) or not isinstance(seed, int) or not (0 <= seed < 2**63):
            raise CompressorError(f"compressor.seed: {seed!r} must be an integer in [0, 2**63)")
        self.budget = budget
        self.budget_bytes = budget_bytes
        self.dtype = check_choice(f"compressor.dtype (for {self.name})", dtype, self.dtypes)
        self.seed = seed

    def _budget_optional(self) -> bool:
        """True when a compressor-specific option (e.g. a fixed rank) stands in for a budget."""
        return False

    # -- public protocol -------------------------------------------------------------------
    def encode(self, tensors: dict[str, torch.Tensor], step: int = 0) -> Payload:
        """Compress `tensors` (any float dtype and device) for training step `step` (>= 0)."""
        prepared = self._prepare(tensors, step)
        entries = [TensorEntry(n, tuple(t.shape), dtype_name(t.dtype)) for n, t in prepared.items()]
        numel = sum(e.numel for e in entries)
        budget = resolve_budget(self.budget, self.budget_bytes, numel) if self.lossy else None
        payload = self._encode({n: t.float() for n, t in prepared.items()}, entries, step, budget)
        payload.info.update(used_bytes=payload.nbytes, budget_bytes=budget,
                            header_bytes=payload.header_nbytes, dense_bf16_bytes=2 * numel)
        if budget is not None and payload.nbytes > budget:  # a bug, never a user error
            raise AssertionError(f"{self.name} produced {payload.nbytes} bytes over its budget {budget}")
        return payload

    def decode(self, payload: Payload) -> dict[str, torch.Tensor]:
        """Float32 CPU tensors with the original shapes, identical bits in any process."""
        if payload.compressor != self.name:
            raise PayloadError(f"payload was made by {payload.compressor!r}; this decoder is {self.name!r}")
        return self._decode_static(payload)

    @classmethod
    def _decode_static(cls, payload: Payload) -> dict[str, torch.Tensor]:
        """Decode with nothing but the payload (every option a decoder needs is on the wire)."""
        try:
            out = cls._decode(payload)
        except PayloadError:
            raise
        except (RuntimeError, ValueError, KeyError, IndexError, TypeError) as err:
            raise PayloadError(f"{cls.name} payload does not decode: {err}") from None
        for e in payload.entries:
            if tuple(out[e.name].shape) != e.shape:
                raise PayloadError(f"{cls.name}: decoded {e.name!r} has shape {tuple(out[e.name].shape)}, "
                                   f"expected {e.shape}")
        return out

    # -- helpers for subclasses ----------------------------------------------------------
    def _prepare(self, tensors: dict[str, torch.Tensor], step: int) -> dict[str, torch.Tensor]:
        if not isinstance(tensors, dict) or not tensors:
            size = len(tensors) if hasattr(tensors, "__len__") else "?"
            raise CompressorError(f"{self.name}.encode: tensors must be a non-empty dict of name -> tensor; "
                                  f"got {type(tensors).__name__} with {size} items")
        if isinstance(step, bool) or not isinstance(step, int) or not (0 <= step < 2**63):
            raise CompressorError(f"{self.name}.encode: step {step!r} must be an integer >= 0")
        for name, t in tensors.items():
            if not isinstance(name, str) or not name:
                raise CompressorError(f"{self.name}.encode: tensor name {name!r} must be a non-empty string")
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                raise CompressorError(f"{self.name}.encode: tensor {name!r} must be a floating-point tensor; "
                                      f"got {getattr(t, 'dtype', type(t).__name__)}")
            if t.numel() == 0:
                raise CompressorError(f"{self.name}.encode: tensor {name!r} is empty (shape {tuple(t.shape)})")
        detached = {name: t.detach() for name, t in tensors.items()}
        self._check_finite(detached)
        return detached

    def _check_finite(self, tensors: dict[str, torch.Tensor]) -> None:
        """CompressorError naming the first tensor with a NaN or inf. One pass per tensor, no copy:
        a finite sum means every element is finite (NaN and inf propagate); a sum that is not finite
        may be an overflow of finite values, so those tensors alone are checked element by element.
        4x cheaper on CPU than a float64 sum, 30x than the inf-norm."""
        names = list(tensors)
        sums = torch.stack([t.sum().cpu() for t in tensors.values()])
        for j in (~torch.isfinite(sums)).nonzero().flatten().tolist():
            if not bool(torch.isfinite(tensors[names[j]]).all()):
                raise CompressorError(f"{self.name}.encode: tensor {names[j]!r} has NaN or inf values")

    def _payload(self, entries: list[TensorEntry], records: list, step: int, meta: dict[str, Any],
                 **info: Any) -> Payload:
        return Payload(self.name, step, self.seed, meta, entries, records, info=dict(info))

    def _over_budget(self, needed: int, budget: int, what: str) -> CompressorError:
        return CompressorError(f"compressor.budget: {budget} bytes cannot hold {what} ({needed} bytes); "
                               "raise compressor.budget / compressor.budget_bytes")

    def _encode(self, tensors: dict[str, torch.Tensor], entries: list[TensorEntry], step: int,
                budget: int | None) -> Payload:
        raise NotImplementedError

    @staticmethod
    def _decode(payload: Payload) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(budget={self.budget}, budget_bytes={self.budget_bytes}, "
                f"dtype={self.dtype!r}, seed={self.seed})")

