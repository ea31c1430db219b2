"""The federated run's knobs, read once from the resolved config and checked.

The launcher builds :class:`Settings` once (``from_cfg``, inside harness.plan.build_plan)
and every party receives it serialised in the RunPlan (``to_dict``/``from_dict``), so
client ranks, sampling, learning rates and the projection seed agree by construction and
no role re-reads the config with defaults.
"""
from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from harness.federated import population as fpop
from harness.federated.methods import METHODS, reference
from harness.federated.projection import LR_RULES, rank_lr
from harness.errors import ConfigError
from harness.seeds import derive

OPTIMIZERS = ("sgd", "adamw")
DROP_POLICIES = ("fail", "continue")
A_VARIANCES = ("rank", "ref")
AGGREGATIONS = ("column", "product")     # spra/ffa: aggregate.column_average | aggregate.padded_update_average


@dataclass(frozen=True)
class Settings:
    method: str
    clients: int
    ranks: tuple[int, ...]       # rank of client k (the config's list, cycled)
    rounds: int
    local_steps: int             # E
    fraction: float
    lr: float                    # eta_ref at r_ref
    r_ref: int
    lr_rule: str
    resample_every: int          # T; 0 never
    eval_every: int
    drop_policy: str
    optimizer: str
    momentum: float
    batch_size: int
    seed: int
    fault_drop_round: int        # tests: this round, client fault_drop_client stops answering
    fault_drop_client: int
    isolate_compute: bool = True     # local trainings take turns (client.compute_token)
    a_variance: str = "rank"         # A_k entries of variance 1/r_k ("rank") or 1/r_ref ("ref")
    prune_gamma: float = 1.0         # hetlora self-pruning: r <- max(1, floor(gamma r)) (pruning.py); 1: off
    prune_lambda: float = 0.0        # hetlora self-pruning: weight of the tail penalty
    population: fpop.PopulationPlan | None = None   # set: `clients` simulated clients run by executors
    aggregation: str = "column"      # spra/ffa: B's column average (column) or sum_k p_k dW_k (product)
    reference: str = ""              # the method the report compares this run with (the one declaring report_reference)
    eval_base: bool = True           # the server evaluates before round 1 too (step 0)

    @property
    def self_prunes(self) -> bool:
        """Clients prune their rank (HetLoRA, pruning.py): only hetlora, and only with gamma < 1."""
        return METHODS[self.method].prunes and self.prune_gamma < 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (what the launcher sends the roles inside the RunPlan)."""
        pop = self.population.to_dict() if self.population else None
        return {**asdict(self), "ranks": list(self.ranks), "population": pop}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Settings":
        """The inverse of :meth:`to_dict` (no defaults restated: every field must be there)."""
        pop = data.get("population")
        return cls(**{**dict(data), "ranks": tuple(int(r) for r in data["ranks"]),
                      "population": fpop.PopulationPlan.from_dict(pop) if pop else None})

    @property
    def r_max(self) -> int:
        return max(self.ranks)

    @property
    def a_var_rank(self) -> int | None:
        """v in A_k = Z[:r_k] / sqrt(v): None (each party's own rank) or r_ref."""
        return self.r_ref if self.a_variance == "ref" else None

    def lr_of(self, client: int) -> float:
        """Client k's learning rate: eta_ref * f(r_k / r_ref)."""
        return rank_lr(self.lr, self.ranks[client], self.r_ref, self.lr_rule)

    def selected(self, round_index: int, alive: list[int]) -> list[int]:
        """The clients of a round: max(1, round(fraction * K)) of the alive ones, seeded by (seed, round)."""
        if not alive:
            return []
        count = min(len(alive), max(1, round(self.fraction * self.clients)))
        return sorted(random.Random(derive("select", self.seed, round_index)).sample(sorted(alive), count))

    def evaluates(self, round_index: int) -> bool:
        """Eval after round t (0-based) every eval_every rounds and after the last."""
        last = round_index == self.rounds - 1
        return last or (self.eval_every > 0 and (round_index + 1) % self.eval_every == 0)


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def from_cfg(cfg: Mapping[str, Any]) -> Settings:
    """Settings of a resolved config (plain dict or DictConfig); ConfigError names a bad key."""
    fed, method = cfg["federated"], cfg["method"]
    name = method["name"]
    _need(name in METHODS, f"method.name: {name!r} is not a federated method; choose one of {', '.join(METHODS)}")
    clients = int(fed["clients"])
    _need(clients >= 1, f"federated.clients: {clients} must be >= 1")
    base = [int(r) for r in fed["ranks"]]
    _need(bool(base) and all(r >= 1 for r in base),
          f"federated.ranks: {base!r} must be a non-empty list of ranks >= 1")
    ranks = tuple(base[k % len(base)] for k in range(clients))
    for key in ("rounds", "local_steps"):
        _need(int(fed[key]) >= 1, f"federated.{key}: {fed[key]!r} must be an integer >= 1")
    population = None
    if fed.get("population") is not None:        # N simulated clients (population.py) instead of `clients`
        population, ranks = fpop.from_cfg(fed, int(cfg["seed"]), int(fed["rounds"]),
                                          int(cfg["task"]["examples"]))
        clients = population.size
    _need(0 < float(fed["fraction"]) <= 1, f"federated.fraction: {fed['fraction']!r} is outside (0, 1]")
    _need(float(fed["lr"]) > 0, f"federated.lr: {fed['lr']!r} must be > 0")
    _need(method["lr_rule"] in LR_RULES, f"method.lr_rule: {method['lr_rule']!r} is not allowed; "
                                         f"choose one of {', '.join(LR_RULES)}")
    _need(int(method["resample_every"]) >= 0,
          f"method.resample_every: {method['resample_every']!r} must be >= 0 (0: never resample)")
    _need(fed["drop_policy"] in DROP_POLICIES, f"federated.drop_policy: {fed['drop_policy']!r} is not allowed; "
                                               f"choose one of {', '.join(DROP_POLICIES)}")
    optimizer = fed["optimizer"]
    _need(optimizer in OPTIMIZERS, f"federated.optimizer: {optimizer!r} is not allowed; choose one of {', '.join(OPTIMIZERS)}")
    a_variance = str(method["a_variance"])
    _need(a_variance in A_VARIANCES, f"method.a_variance: {a_variance!r} is not allowed; choose one of "
                                     f"{', '.join(A_VARIANCES)} (A_k = Z / sqrt(r_k) or Z / sqrt(r_ref))")
    gamma, lam = float(method["prune_gamma"]), float(method["prune_lambda"])
    _need(0 < gamma <= 1, f"method.prune_gamma: {gamma!r} is outside (0, 1] (rank decay factor; 1: never prune)")
    _need(lam >= 0, f"method.prune_lambda: {lam!r} must be >= 0 (weight of the tail penalty)")
    pruners = [n for n, cls in METHODS.items() if cls.prunes]
    _need(METHODS[name].prunes or (gamma == 1.0 and lam == 0.0),
          f"method.prune_gamma/prune_lambda: {gamma!r}/{lam!r} set for method {name!r}; only {', '.join(pruners)} "
          f"self-prunes (leave them at 1.0/0.0)")
    aggregation = str(fed["aggregation"])
    _need(aggregation in AGGREGATIONS, f"federated.aggregation: {aggregation!r} is not allowed; choose one of "
                                       f"{', '.join(AGGREGATIONS)}")
    shared = [n for n, cls in METHODS.items() if cls.seeded_basis]
    _need(aggregation == "column" or METHODS[name].seeded_basis,
          f"federated.aggregation: product is not allowed with method {name!r}; it is exact in B alone only "
          f"with a shared A ({', '.join(shared)}); column for the others")
    split = cfg["task"]["eval_split"]
    _need(split in ("test", "validation"), f"task.eval_split: {split!r} is not allowed; choose test or validation")
    r_ref = int(fed["r_ref"]) if fed.get("r_ref") else max(ranks)
    _need(r_ref >= 1, f"federated.r_ref: {fed.get('r_ref')!r} must be >= 1")
    _need(int(fed["eval_every"]) >= 0, f"federated.eval_every: {fed['eval_every']!r} must be >= 0 (0: last round only)")
    return Settings(
        method=name, clients=clients, ranks=ranks, rounds=int(fed["rounds"]), local_steps=int(fed["local_steps"]),
        fraction=float(fed["fraction"]), lr=float(fed["lr"]), r_ref=r_ref, lr_rule=str(method["lr_rule"]),
        resample_every=int(method["resample_every"]), eval_every=int(fed["eval_every"]),
        drop_policy=str(fed["drop_policy"]), optimizer=optimizer, momentum=float(fed["momentum"]),
        batch_size=int(cfg["task"]["batch_size"]), seed=int(cfg["seed"]),
        fault_drop_round=int(fed["fault_drop_round"]), fault_drop_client=int(fed["fault_drop_client"]),
        isolate_compute=bool(fed["isolate_compute"]), a_variance=a_variance,
        prune_gamma=gamma, prune_lambda=lam, population=population, aggregation=aggregation,
        reference=reference(), eval_base=bool(fed.get("eval_base", True)),
    )
