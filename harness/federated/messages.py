"""The two federated messages, server -> client (:class:`DownMsg`) and back (:class:`UpMsg`).

Tensors are named by the target's index in the shared sorted target list: ``c/3`` is the
coefficients of target 3, ``z/3`` its basis, ``m5/c/3`` the coefficients of base merge #5.
Everything else (round, period, checksums, timings) is a small JSON header (codec.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from harness.federated.codec import decode, encode, tensor_bytes
from harness.federated.methods import Down, Merge


def _pack(prefix: str, names: list[str], tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    index = {n: i for i, n in enumerate(names)}
    return {f"{prefix}{index[n]}": t for n, t in tensors.items()}


def _unpack(prefix: str, names: list[str], flat: dict[str, Tensor]) -> dict[str, Tensor]:
    return {names[int(k[len(prefix):])]: v for k, v in flat.items()
            if k.startswith(prefix) and k[len(prefix):].isdigit()}


@dataclass
class DownMsg:
    """Round ``round`` for one client: its factors, pending base merges, the checksum to expect."""
    round: int
    selected: bool
    down: Down = field(default_factory=Down)
    merges: list[Merge] = field(default_factory=list)
    expect: str = ""             # the server's checksum of base (+ seeded Z) after these merges
    last_up_s: float | None = None   # receiver-measured seconds of this client's previous update

    def to_bytes(self, names: list[str]) -> bytes:
        tensors = {**_pack("c/", names, self.down.c), **_pack("z/", names, self.down.z)}
        merges = []
        for m in self.merges:
            tensors.update(_pack(f"m{m.index}/c/", names, m.c))
            if m.z is not None:
                tensors.update(_pack(f"m{m.index}/z/", names, m.z))
            merges.append({"index": m.index, "period": m.period, "z": m.z is not None})
        meta = {"round": self.round, "selected": self.selected, "basis": self.down.basis,
                "period": self.down.period, "merges": merges, "expect": self.expect,
                "last_up_s": self.last_up_s}
        return encode(tensors, meta)

    @classmethod
    def from_bytes(cls, data: bytes, names: list[str]) -> "DownMsg":
        flat, meta = decode(data)
        merges = [Merge(index=m["index"], c=_unpack(f"m{m['index']}/c/", names, flat),
                        z=_unpack(f"m{m['index']}/z/", names, flat) if m["z"] else None, period=m["period"])
                  for m in meta["merges"]]
        down = Down(c=_unpack("c/", names, flat), z=_unpack("z/", names, flat), basis=meta["basis"],
                    period=meta["period"])
        return cls(meta["round"], meta["selected"], down, merges, meta["expect"], meta["last_up_s"])


@dataclass
class UpMsg:
    """What client k sends after local training (or ``gone``/idle with no tensors)."""
    round: int
    c: dict[str, Tensor] = field(default_factory=dict)
    z: dict[str, Tensor] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)   # examples, checksum, in_sync, timings, loss
    gone: bool = False

    def to_bytes(self, names: list[str]) -> bytes:
        tensors = {**_pack("c/", names, self.c), **_pack("z/", names, self.z)}
        return encode(tensors, {"round": self.round, "gone": self.gone, **self.info})

    @classmethod
    def from_bytes(cls, data: bytes, names: list[str]) -> "UpMsg":
        flat, meta = decode(data)
        r, gone = meta.pop("round"), meta.pop("gone")
        return cls(r, _unpack("c/", names, flat), _unpack("z/", names, flat), meta, gone)

    @property
    def tensor_bytes(self) -> int:
        return tensor_bytes(self.c) + tensor_bytes(self.z)
