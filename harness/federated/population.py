"""A federated population: N simulated clients, K sampled per round, run by P executor processes.

Pure and seeded (no process, link or model here): who the N clients are (rank, uplink and
downlink rate and delay, drawn once per client from the config's distributions), whether each
is available in a round (always, or a two-state Markov chain per client), which K are sampled
in a round, and which executor runs which sampled client. ``federated.population`` unset: no
PopulationPlan, the federated run is the classic one (one process per client, every round).

Draws (each its own stream, ``harness.seeds.derive``):
  rank of client k       ``random.choices(federated.ranks, federated.rank_weights)``
  rate (up, down)        log-uniform in ``federated.up_mbit`` / ``down_mbit`` = [lo, hi] Mbit/s
  delay (one way)        uniform in ``federated.delay_ms`` = [lo, hi] ms, the same up and down
  availability           ``always``, or ``markov``: on -> off with p_off per round, off -> on with
                         p_on; round 0 from the chain's stationary law p_on / (p_on + p_off)
  sample of round t      K of the N clients, uniformly without replacement; the sampled clients
                         that are off in round t are ``unavailable`` and do not run (FedScale
                         samples among the online clients; ours keeps the unavailable ones
                         visible in the rows)
  assignment             the available sampled clients, in sampled order, dealt round-robin
                         to the live executors; an executor runs its clients one after another
"""
from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import ConfigError
from harness.seeds import derive

AVAILABILITY = ("always", "markov")


@dataclass(frozen=True)
class PopulationPlan:
    """Everything decided about the population before any process starts (JSON-able).

    Units: bits per second (``*_bps``), seconds (``*_s``). Invariants: 1 <= per_round <= size,
    1 <= executors <= size, deadline_s None or >= 0, one entry per client in every tuple.
    """
    size: int                          # N
    per_round: int                     # K
    executors: int                     # P
    deadline_s: float | None           # a client whose down + compute + up exceeds it is dropped
    up_bps: tuple[float, ...]
    down_bps: tuple[float, ...]
    delay_s: tuple[float, ...]         # one-way, each direction
    availability: str
    p_off: float
    p_on: float
    seed: int
    rounds: int

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PopulationPlan:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    def sample(self, t: int) -> list[int]:
        """The K clients sampled in round t (sorted), seeded by (seed, t)."""
        return sorted(random.Random(derive("population-sample", self.seed, t)).sample(range(self.size),
                                                                                       self.per_round))

    def trace(self, k: int) -> list[bool]:
        """Client k's on/off state in every round (True: available)."""
        if self.availability == "always":
            return [True] * self.rounds
        rng = random.Random(derive("population-availability", self.seed, k))
        on = rng.random() < self.p_on / (self.p_on + self.p_off)
        out = []
        for _ in range(self.rounds):
            out.append(on)
            on = (rng.random() >= self.p_off) if on else (rng.random() < self.p_on)
        return out

    def available(self, k: int, t: int) -> bool:
        return self.trace(k)[t]

    def link(self, k: int) -> dict[str, float]:
        """Client k's link: up/down rate (bits/s) and one-way delay (s) of each direction."""
        return {"up_bps": self.up_bps[k], "down_bps": self.down_bps[k], "delay_s": self.delay_s[k]}


def assign(clients: list[int], executors: list[int]) -> dict[int, list[int]]:
    """Deal ``clients`` (in order) round-robin to ``executors``; every executor gets a list."""
    out: dict[int, list[int]] = {e: [] for e in executors}
    for i, k in enumerate(clients):
        out[executors[i % len(executors)]].append(k)
    return out


def _fail(key: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"federated.{key}: {value!r} {allowed}")


def _range(fed: Mapping[str, Any], key: str, low: float) -> tuple[float, float]:
    value = fed.get(key)
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise _fail(key, value, "must be a [low, high] pair of numbers") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and low <= lo <= hi):
        raise _fail(key, value, f"must be [low, high] with {low:g} <= low <= high")
    return lo, hi


def from_cfg(fed: Mapping[str, Any], seed: int, rounds: int, examples: int) -> tuple[PopulationPlan, tuple[int, ...]]:
    """The population of ``federated.*`` and each client's rank; ConfigError names a bad key."""
    n = fed["population"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise _fail("population", n, "must be an integer >= 1 (unset: one process per client, every round)")
    if n > examples:
        raise _fail("population", n, f"must be <= task.examples ({examples}): each client needs data")
    k, p = fed.get("per_round"), fed.get("executors")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise _fail("per_round", k, f"must be an integer in 1..{n} (federated.population)")
    if isinstance(p, bool) or not isinstance(p, int) or not 1 <= p <= n:
        raise _fail("executors", p, f"must be an integer in 1..{n} (federated.population)")
    deadline = fed.get("deadline_s")
    if deadline is not None and not (isinstance(deadline, (int, float)) and not isinstance(deadline, bool)
                                     and math.isfinite(deadline) and deadline >= 0):
        raise _fail("deadline_s", deadline, "must be a number of seconds >= 0, or null for no deadline")
    ranks = [int(r) for r in fed["ranks"]]
    weights = list(fed.get("rank_weights") or [1.0] * len(ranks))
    if len(weights) != len(ranks) or any(float(w) < 0 for w in weights) or sum(float(w) for w in weights) <= 0:
        raise _fail("rank_weights", list(weights), f"must be {len(ranks)} weights >= 0 (one per federated.ranks "
                    "entry), not all 0; [] for equal weights")
    up, down = _range(fed, "up_mbit", 1e-3), _range(fed, "down_mbit", 1e-3)
    delay = _range(fed, "delay_ms", 0.0)
    availability = str(fed.get("availability", "always"))
    if availability not in AVAILABILITY:
        raise _fail("availability", availability, f"is not allowed; choose one of {', '.join(AVAILABILITY)}")
    p_off, p_on = float(fed.get("p_off", 0.0)), float(fed.get("p_on", 1.0))
    for key, prob in (("p_off", p_off), ("p_on", p_on)):
        if not 0 <= prob <= 1:
            raise _fail(key, prob, "must be a probability in [0, 1]")
    if availability == "markov" and p_on <= 0:
        raise _fail("p_on", p_on, "must be > 0 with availability=markov (a client that is off would stay off)")

    def log_uniform(stream: str, lo: float, hi: float) -> tuple[float, ...]:
        return tuple(1e6 * math.exp(random.Random(derive(stream, seed, c)).uniform(math.log(lo), math.log(hi)))
                     for c in range(n))

    drawn = tuple(random.Random(derive("population-rank", seed, c)).choices(ranks, [float(w) for w in weights])[0]
                  for c in range(n))
    plan = PopulationPlan(
        size=n, per_round=k, executors=p, deadline_s=None if deadline is None else float(deadline),
        up_bps=log_uniform("population-up", *up), down_bps=log_uniform("population-down", *down),
        delay_s=tuple(random.Random(derive("population-delay", seed, c)).uniform(*delay) / 1e3 for c in range(n)),
        availability=availability, p_off=p_off, p_on=p_on, seed=seed, rounds=rounds)
    return plan, drawn
