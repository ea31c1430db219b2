"""What every federated LoRA method shares: the messages' parts, the Method protocol, the (C, Z) state.

All state is in (C, Z) form per target (adapter.py): the global adapter product is
``C Z``. A method is the server side of one algorithm; the client side is generic (client.py
loads the factors it is sent, trains B, and A unless the method freezes it, and sends back
C, plus Z when A was trained).

Base merges (spra at a period change, flora every round) are logged as :class:`Merge`
entries; every party applies the same entries in the same order with
``projection.merge`` (bit-identical bases, verified by checksum). A client that was not
selected for a while gets the entries it missed with its next downlink.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from harness.federated.adapter import Target
from harness.federated.projection import draw


@dataclass(frozen=True)
class Setup:
    """What every party knows from the config: targets, per-client ranks, seed, T."""
    targets: list[Target]
    ranks: list[int]             # rank of client k (0-based)
    seed: int
    resample_every: int = 0      # T (spra); 0: never
    aggregation: str = "column"  # spra/ffa: column (column_average) | product (padded_update_average)

    @property
    def r_max(self) -> int:
        return max(self.ranks)


@dataclass
class Merge:
    """``W += C Z`` in every target; ``z`` None: Z is the seeded draw of ``period``."""
    index: int
    c: dict[str, Tensor]
    z: dict[str, Tensor] | None = None
    period: int | None = None


@dataclass
class Down:
    """What the server sends client k this round (pending merges are added by the caller).

    ``basis``: "given" (Z in ``z``), "seed" (Z = draw(seed, period, name)[:r_k]) or
    "fresh" (Z = draw(seed, round, name/client k)[:r_k], B = 0: a new LoRA).
    """
    c: dict[str, Tensor] = field(default_factory=dict)
    z: dict[str, Tensor] = field(default_factory=dict)
    basis: str = "given"
    period: int = 0


@dataclass
class Update:
    """What client k sent back: its coefficients (and basis when A was trained)."""
    client: int
    rank: int
    weight: float                # number of training examples
    c: dict[str, Tensor]
    z: dict[str, Tensor] | None = None


def fresh_basis(seed: int, round_index: int, client: int, target: Target, rank: int) -> Tensor:
    """A new client LoRA's Z (flora), distinct per round and client, from the seed."""
    return draw(seed, round_index, f"{target.name}/client{client}", rank, target.d_in)


class Method:
    """Server side of one federated LoRA algorithm: one subclass with a ``name`` per module of
    harness/federated/methods/ (found by discovery, ``harness.federated.methods.METHODS``)."""
    name = ""
    trains_a = True              # the client trains A (and sends Z up)
    seeded_basis = False         # Z comes from the seed (never on the wire)
    report_reference = False     # the report's reference: ratios and gains are taken against it (one method)
    prunes = False               # clients may self-prune their rank (method.prune_gamma < 1: pruning.py)

    def __init__(self, setup: Setup) -> None:
        self.setup = setup

    def begin_round(self, t: int) -> Merge | None:
        """Called before round t's downlinks; may return a base merge to log and apply."""
        return None

    def down(self, t: int, client: int) -> Down:
        raise NotImplementedError

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        """Fold the round's updates (dropped clients absent) into the state; may return a merge."""
        raise NotImplementedError

    def delta(self, name: str) -> Tensor:
        """The global adapter's product for target ``name`` (d_out x d_in, float64), merges excluded."""
        raise NotImplementedError

    def basis_extra(self) -> dict[str, Tensor]:
        """Tensors every client must hold identically besides the base (checksummed)."""
        return {}


class Basis(Method):
    """Methods whose global adapter is (C, Z) at rank r_max: spra, ffa, fedit, hetlora (no name: not a method)."""

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.period = 0
        self.ranks = list(setup.ranks)          # each client's current rank (HetLoRA's pruning lowers it)
        self.c = {t.name: torch.zeros(t.d_out, setup.r_max) for t in setup.targets}
        self.z = {t.name: draw(setup.seed, 0, t.name, setup.r_max, t.d_in) for t in setup.targets}

    def down(self, t: int, client: int) -> Down:
        r = self.ranks[client]
        c = {n: v[:, :r].contiguous() for n, v in self.c.items()}
        if self.seeded_basis:
            return Down(c=c, basis="seed", period=self.period)
        return Down(c=c, z={n: v[:r].contiguous() for n, v in self.z.items()}, period=self.period)

    def delta(self, name: str) -> Tensor:
        return self.c[name].to(torch.float64) @ self.z[name].to(torch.float64)
