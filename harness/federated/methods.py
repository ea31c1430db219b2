"""Federated LoRA methods: what the server keeps, what goes down and up, how it aggregates.

All state is in (C, Z) form per target (adapter.py): the global adapter product is
``C Z``. A method is the server side of one algorithm; the client side is generic (roles.py
loads the factors it is sent, trains B, and A unless the method freezes it, and sends back
C, plus Z when A was trained).

==========  ===================  ==================  ==================  =====================
method      server state         down (client k)     up                  aggregate
==========  ===================  ==================  ==================  =====================
spra        C; Z_p from seed     C[:, :r_k] + seed   C_k                 column average of C (or
                                                                         product: padded update avg)
            merge-and-reset every T rounds (period p -> p+1: W += C Z_p, C = 0, new Z)
ffa         as spra, T = 0       C[:, :r_k] + seed   C_k                 column average of C
fedit       C, Z                 C[:, :r_k], Z[:r_k] C_k, Z_k            column / row average
hetlora     C, Z                 C[:, :r_k], Z[:r_k] C_k, Z_k            zero-pad average
flora       (merged into W)      pending merges      C_k, Z_k            stack -> merge into W
flexlora    D = sum p_k C_k Z_k  SVD of D at r_k     C_k, Z_k            product average
==========  ===================  ==================  ==================  =====================

Base merges (spra at a period change, flora every round) are logged as :class:`Merge`
entries; every party applies the same entries in the same order with
``projection.merge`` (bit-identical bases, verified by checksum). A client that was not
selected for a while gets the entries it missed with its next downlink.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from harness.federated import aggregate as agg
from harness.federated.adapter import Target
from harness.federated.projection import draw, period_of


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
    """Server side of one federated LoRA algorithm (subclasses below)."""
    name = "base"
    trains_a = True              # the client trains A (and sends Z up)
    seeded_basis = False         # Z comes from the seed (never on the wire)

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
    """Methods whose global adapter is (C, Z) at rank r_max: spra, ffa, fedit, hetlora."""

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


class Spra(Basis):
    """SPRA-LoRA: Z_p from the seed, B only, merge-and-reset every T rounds."""
    name = "spra"
    trains_a = False
    seeded_basis = True

    def begin_round(self, t: int) -> Merge | None:
        period = period_of(t, self.setup.resample_every)
        if period == self.period:
            return None
        merge = Merge(index=-1, c={n: v.clone() for n, v in self.c.items()}, period=self.period)
        self.period = period
        self.c = {n: torch.zeros_like(v) for n, v in self.c.items()}
        self.z = {tg.name: draw(self.setup.seed, period, tg.name, self.setup.r_max, tg.d_in)
                  for tg in self.setup.targets}
        return merge

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        average = agg.padded_update_average if self.setup.aggregation == "product" else agg.column_average
        for n in self.c:
            self.c[n] = average([(u.c[n], u.weight) for u in updates], self.c[n])
        return None

    def basis_extra(self) -> dict[str, Tensor]:
        return dict(self.z)


class Ffa(Spra):
    """FFA-LoRA: A frozen once (T = 0 whatever the config), B only."""
    name = "ffa"

    def begin_round(self, t: int) -> Merge | None:
        return None


class FedIt(Basis):
    """FedIT: A and B trained, sent and averaged separately (column / row average)."""
    name = "fedit"

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        for n in self.c:
            self.c[n] = agg.column_average([(u.c[n], u.weight) for u in updates], self.c[n])
            self.z[n] = agg.row_average([(u.z[n], u.weight) for u in updates], self.z[n])
        return None


class HetLora(Basis):
    """HetLoRA (Cho et al. 2024): zero-pad to r_max, sparsity-weighted average (weights
    ``||C_k Z_k||_F`` per target, aggregate.norm_weights), clients truncate to their current
    rank. Clients self-prune (pruning.py); an update's width is the client's rank from then on."""
    name = "hetlora"

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        for u in updates:
            self.ranks[u.client] = u.rank
        for n in self.c:
            w = agg.norm_weights([((u.c[n], u.z[n]), u.weight) for u in updates]) if updates else []
            self.c[n] = agg.zero_pad_average([(u.c[n], wk) for u, wk in zip(updates, w)], self.c[n], dim=1)
            self.z[n] = agg.zero_pad_average([(u.z[n], wk) for u, wk in zip(updates, w)], self.z[n], dim=0)
        return None


class FLora(Method):
    """FLoRA: fresh LoRA per round; the server stacks the updates (exact) and every party
    merges the stack into its base."""
    name = "flora"

    def down(self, t: int, client: int) -> Down:
        return Down(basis="fresh", period=t)

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        if not updates:
            return None
        c, z = {}, {}
        for n in (tg.name for tg in self.setup.targets):
            c[n], z[n] = agg.stack([((u.c[n], u.z[n]), u.weight) for u in updates])
        return Merge(index=-1, c=c, z=z)

    def delta(self, name: str) -> Tensor:
        tg = next(t for t in self.setup.targets if t.name == name)
        return torch.zeros(tg.d_out, tg.d_in, dtype=torch.float64)


class FlexLora(Method):
    """FlexLoRA (Bai et al. 2024): the server keeps the full product average D and gives each
    client the best rank-r_k factors of it (truncated SVD, B = U S, A = V^T: aggregate.svd_split)."""
    name = "flexlora"

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.d = {t.name: torch.zeros(t.d_out, t.d_in, dtype=torch.float64) for t in setup.targets}
        self._svd: dict[str, tuple[Tensor, Tensor, Tensor]] = {}

    def begin_round(self, t: int) -> Merge | None:
        self._svd = {n: torch.linalg.svd(d, full_matrices=False) for n, d in self.d.items()
                     if torch.count_nonzero(d) > 0}
        return None

    def down(self, t: int, client: int) -> Down:
        r = self.setup.ranks[client]
        c, z = {}, {}
        for tg in self.setup.targets:
            if tg.name not in self._svd:       # no update yet: a drawn basis, C = 0 (a fresh LoRA)
                c[tg.name] = torch.zeros(tg.d_out, r)
                z[tg.name] = draw(self.setup.seed, 0, tg.name, self.setup.r_max, tg.d_in)[:r].contiguous()
                continue
            # in LoRA terms (scale 1, A = Z / sqrt(r), adapter.py): B = U S, A = V^T, as in the paper
            b, a = agg.split_factors(*self._svd[tg.name], r)
            c[tg.name], z[tg.name] = (b / math.sqrt(r)).float(), (a * math.sqrt(r)).float()
        return Down(c=c, z=z)

    def aggregate(self, t: int, updates: list[Update]) -> Merge | None:
        if updates:
            for n in self.d:
                self.d[n] = agg.product_average([((u.c[n], u.z[n]), u.weight) for u in updates])
        return None

    def delta(self, name: str) -> Tensor:
        return self.d[name]


METHODS: dict[str, type[Method]] = {m.name: m for m in (Spra, Ffa, FedIt, HetLora, FLora, FlexLora)}


def build(name: str, setup: Setup) -> Method:
    """The server side of method ``name``; a ValueError names the allowed ones."""
    if name not in METHODS:
        raise ValueError(f"method.name: {name!r} is not a federated method; choose one of {', '.join(METHODS)}")
    return METHODS[name](setup)
