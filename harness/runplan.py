"""The typed RunPlan: the one thing that crosses into a role (``payload["plan"]``, decoded once where
the role starts: ``RunPlan.from_dict``), built by harness.plan.build_plan.

Its parts, all typed: the method family's plan (:class:`harness.onpolicy.setup.OnPolicyPlan` or
:class:`harness.federated.settings.Settings`), the model and the task (the schema's own
``ModelConfig`` / ``TaskConfig``: every field set, the schema the one place a default lives), the
links (every role's uplink and downlink LinkSpec, and the resolved backend), where each role runs
(``placement``) and where its bases come from (``model_source``). ``to_dict``/``from_dict``
round-trip exactly (run.json records the dict; the report reads it).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Mapping

from harness.backends import Backend
from harness.conf.schema import ModelConfig, TaskConfig
from harness.federated.settings import Settings
from harness.onpolicy.setup import OnPolicyPlan
from harness.placement import Placement
from harness.tasks.plans import as_dict, model_plan, task_plan
from harness.tasks.source import ModelSource
from netem.spec import LinkSpec

ENTRIES = {"onpolicy": "harness.onpolicy.loop:main", "federated": "harness.federated.entry:main"}


class MethodKind(str, Enum):
    """``method.kind``: which loops run (a closed set)."""
    ONPOLICY = "onpolicy"
    FEDERATED = "federated"


@dataclass(frozen=True)
class RolePlan:
    """One role process: name, process rank (0 = hub), its links, device and seed."""
    name: str                  # learner | worker<i> | server | client<k>
    rank: int                  # torch.distributed rank
    up: LinkSpec               # egress at the role (towards the hub)
    down: LinkSpec             # towards the role
    device: str                # cpu | auto | cuda | cuda:i
    seed: int
    lora_rank: int             # the adapter rank this role trains (federated clients differ)
    expendable: bool = False   # may die without failing the run (federated drop_policy=continue)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RolePlan":
        return cls(**{**dict(data), "up": LinkSpec(**data["up"]), "down": LinkSpec(**data["down"])})


@dataclass(frozen=True)
class RunPlan:
    """Everything a run is, resolved and checked (see the module docstring)."""
    kind: MethodKind
    method: str
    backend: Backend                 # resolved (never AUTO)
    backend_requested: Backend
    backend_reason: str              # why this backend, said once at launch and kept in run.json
    entry: str                       # "package.module:function" of the role processes
    roles: tuple[RolePlan, ...]
    seed: int
    hang_timeout_s: float            # seconds without progress before the run is failed
    keys: dict = field(default_factory=dict)     # row keys except the run's identity
    onpolicy: OnPolicyPlan | None = None
    federated: Settings | None = None
    placement: Placement | None = None           # each role's host, cores and GPU (None: an old plan, the star)
    model_source: ModelSource | None = None      # where the bases come from (harness/tasks/source.py), decided once
    model: ModelConfig = field(default_factory=ModelConfig)   # the base model and its LoRA (typed: the schema's)
    task: TaskConfig = field(default_factory=TaskConfig)      # what is learned (typed: the schema's)

    @property
    def links(self) -> tuple[tuple[LinkSpec, LinkSpec], ...]:
        """(uplink, downlink) of every role, hub first: the run's typed link part (with ``backend``)."""
        return tuple((r.up, r.down) for r in self.roles)

    def role_specs(self) -> list:
        """harness.cluster.launch.RoleSpec of every role, hub first."""
        return _specs(self.roles, self.placement)

    def run_keys(self, scenario: str, variant: str, run_id: str) -> dict[str, Any]:
        """The key columns of every row of this run."""
        return {"run_id": run_id, "scenario": scenario, "variant": variant, **self.keys}

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value, "method": self.method, "backend": self.backend.value,
            "backend_requested": self.backend_requested.value, "backend_reason": self.backend_reason,
            "entry": self.entry, "roles": [r.to_dict() for r in self.roles], "seed": self.seed,
            "hang_timeout_s": self.hang_timeout_s, "keys": dict(self.keys),
            "onpolicy": self.onpolicy.to_dict() if self.onpolicy else None,
            "federated": self.federated.to_dict() if self.federated else None,
            "placement": self.placement.to_dict() if self.placement else None,
            "model_source": self.model_source.to_dict() if self.model_source else None,
            "model": as_dict(self.model), "task": as_dict(self.task),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RunPlan":
        return cls(
            kind=MethodKind(data["kind"]), method=data["method"], backend=Backend(data["backend"]),
            backend_requested=Backend(data["backend_requested"]), backend_reason=data["backend_reason"],
            entry=data["entry"], roles=tuple(RolePlan.from_dict(r) for r in data["roles"]), seed=int(data["seed"]),
            hang_timeout_s=float(data["hang_timeout_s"]), keys=dict(data["keys"]),
            onpolicy=OnPolicyPlan.from_dict(data["onpolicy"]) if data["onpolicy"] else None,
            federated=Settings.from_dict(data["federated"]) if data["federated"] else None,
            placement=Placement.from_dict(data["placement"]) if data.get("placement") else None,
            model_source=ModelSource.from_dict(data["model_source"]) if data.get("model_source") else None,
            model=model_plan(data["model"]), task=task_plan(data["task"]),
        )


def _specs(roles: tuple[RolePlan, ...], placement: Placement | None = None) -> list:
    """RoleSpecs; with a placement each carries its host, core slots and device (``cuda:<gpu>`` with a GPU)."""
    from harness.cluster.launch import RoleSpec

    places = {p.role: p for p in placement.roles} if placement else {}
    return [RoleSpec(name=r.name, up=r.up, down=r.down, expendable=r.expendable,
                     device=places[r.name].device(r.device) if r.name in places else r.device,
                     cores=places[r.name].cores if r.name in places else (),
                     host=places[r.name].host if r.name in places else "local") for r in roles]
