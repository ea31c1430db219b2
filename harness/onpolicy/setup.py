"""What every on-policy role builds: its settings (checked once, in the launcher), the policy
(student base + LoRA), its replica (adapter tensors + optimizer where needed), the task and
its side of the sync.

:class:`OnPolicyPlan` is the on-policy part of the run's RunPlan (harness/plan.py): the
launcher builds it once with :func:`plan_from_cfg` (every knob a role used to check, checked
before any namespace or process exists) and the roles receive it serialised
(``to_dict``/``from_dict``), so no role re-reads the config with defaults.

Every process builds the adapter from the same seed (``seed``), so all replicas start
identical; the loop checks that before the first update. The run seed reaches everything
random: LoRA init (here), training prompts and sampling (roles), and the compressor's own
randomness, seeded by ``compressor_seed(seed, compressor.seed)`` (every process alike). The learner alone loads the
teacher (distill) and always holds an optimizer; workers hold one only when the method
replays steps (hilo).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import torch

from harness.conf.schema import ModelConfig, TaskConfig
from harness.errors import ConfigError
from harness.onpolicy import methods as sync_methods
from harness.onpolicy.state import WIRE_DTYPES, Replica, SyncError, adapter_params, flip_bit, make_optimizer
from harness.optim import OPTIMIZERS
from harness.seeds import derive

FLIP_TARGETS = ("param", "exp_avg")
STALENESS = (0, 1)     # 0: synchronous; 1: one update of overlap (rollouts t+1 while update t is on the wire)


@dataclass(frozen=True)
class CompressorPlan:
    """The compressor section as :func:`harness.compress.build` takes it (dry-built by the planner)."""
    name: str
    budget: float | None             # fraction of the bf16 bytes of what is encoded
    budget_bytes: int | None         # absolute budget (bytes); wins over budget
    dtype: str                       # factor / value dtype on the wire
    seed: int
    options: dict                    # compressor-specific extras, checked against build()'s options
    error_feedback: bool             # where the residual lives is the sync method's choice

    def build(self) -> Any:
        """A fresh compressor without its own error feedback (the sync method wraps it)."""
        from harness.compress import build

        return build(self.name, budget=self.budget, budget_bytes=self.budget_bytes, dtype=self.dtype,
                     seed=self.seed, options=dict(self.options), error_feedback=False)


@dataclass(frozen=True)
class OnPolicyPlan:
    """The on-policy knobs of one run, resolved and checked (units: lr per step, clip_norm L2)."""
    method: str                      # an on-policy method (harness.onpolicy.methods.names())
    sync_module: str                 # the module whose SYNCS declares it (method.sync)
    workers: int
    steps: int                       # updates
    training_rank: int               # LoRA rank trained (method.rank wins over model.rank)
    prompt_batch: int                # prompts per update, sharded over the workers
    lr: float
    optimizer: str                   # one of OPTIMIZERS
    weight_decay: float
    clip_norm: float                 # 0: off
    eval_every: int
    eval_final: bool                 # evaluate after the last update (false: a timing-only run)
    eval_base: bool                  # evaluate the base policy (before update 0) too
    sync_dtype: str                  # full_sync / lowrank wire dtype
    verify_every: int                # 0: never
    policy_kl: bool
    seed: int                        # adapter init and prompts; the same in every role by design
    fault_flip_step: int             # tests only: -1 never
    fault_flip_worker: int
    fault_flip_target: str
    compressor: CompressorPlan | None   # delta / hilo only
    codec: str = "zstd"              # patch: byte codec of the sparse bf16 patch
    staleness: int = 0               # k: update t's rollouts come from policy max(t - k, 0); 0 or 1
    codec_level: int = 3             # patch: zstd level
    curve_prompts: int = 0           # >0: evaluations before the last score only the first N held-out prompts
    eval_threads: int = 1            # the learner's CPU threads while it evaluates (fixed => same bits everywhere)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "OnPolicyPlan":
        comp = data["compressor"]
        return cls(**{**dict(data), "compressor": CompressorPlan(**comp) if comp is not None else None})


def _allowed(key: str, value: Any, allowed) -> ConfigError:
    return ConfigError(f"{key}: {value!r} is not allowed; choose one of {', '.join(map(str, allowed))}")


def plan_from_cfg(cfg: Mapping[str, Any]) -> OnPolicyPlan:
    """The OnPolicyPlan of a composed config; ConfigError (one line: key, value, allowed) on a bad knob."""
    method, op, task, comp = cfg["method"], cfg["onpolicy"], cfg["task"], cfg["compressor"]
    name = str(method["name"])
    module = sync_methods.module_of(name, method.get("sync"))
    if not module:
        raise _allowed("method.name", name, sync_methods.names())
    try:
        declared = sync_methods.lookup(name, module)
    except SyncError as err:
        raise ConfigError(str(err)) from None
    workers, steps = int(op["workers"]), int(op["steps"])
    if workers < 1 or steps < 1:
        raise ConfigError(f"onpolicy.workers / onpolicy.steps: {workers} / {steps}; both must be >= 1")
    if int(task["prompt_batch"]) < workers:
        raise ConfigError(f"task.prompt_batch: {task['prompt_batch']} prompts cannot be sharded over {workers} "
                          f"workers (onpolicy.workers); use prompt_batch >= workers")
    if op["optimizer"] not in OPTIMIZERS:
        raise _allowed("onpolicy.optimizer", op["optimizer"], OPTIMIZERS)
    if method["sync_dtype"] not in WIRE_DTYPES:
        raise _allowed("method.sync_dtype", method["sync_dtype"], WIRE_DTYPES)
    if op["fault_flip_target"] not in FLIP_TARGETS:
        raise _allowed("onpolicy.fault_flip_target", op["fault_flip_target"], FLIP_TARGETS)
    for key in ("lr", "weight_decay", "clip_norm"):
        if not float(op[key]) >= 0:
            raise ConfigError(f"onpolicy.{key}: {op[key]!r} must be >= 0")
    for key, value in (("onpolicy.eval_every", op["eval_every"]), ("method.verify_every", method["verify_every"])):
        if int(value) < 0:
            raise ConfigError(f"{key}: {value!r} must be >= 0 (0: never)")
    if int(op["staleness"]) not in STALENESS:
        raise _allowed("onpolicy.staleness", op["staleness"], STALENESS)
    compressor = None
    if declared.uses_compressor:
        compressor = CompressorPlan(
            name=str(comp["name"]), budget=None if comp["budget"] is None else float(comp["budget"]),
            budget_bytes=None if comp["budget_bytes"] is None else int(comp["budget_bytes"]),
            dtype=str(comp["dtype"]), seed=compressor_seed(int(cfg["seed"]), int(comp["seed"])), options=dict(comp["options"] or {}),
            error_feedback=bool(comp["error_feedback"]))
        from harness.compress import CompressorError

        try:
            compressor.build()                  # dry build: unknown options, budgets, dtypes fail here
        except CompressorError as err:
            raise ConfigError(str(err).splitlines()[0]) from None
        if compressor.options.get("backward_grams") and name != "hilo":
            raise ConfigError(f"compressor.options.backward_grams: true is not allowed with method.name={name}; "
                              "only hilo encodes the gradients that backward produces (harness.onpolicy.overlap)")
        if compressor.options.get("allocation") == "preconditioned" and (name != "hilo" or op["optimizer"] == "sgd"):
            raise ConfigError(f"compressor.options.allocation: preconditioned is not allowed with method.name={name} "
                              f"and onpolicy.optimizer={op['optimizer']}; only hilo with adamw or adam holds the "
                              "replicated Adam state it reads (energy or normalized otherwise)")
    if name == "patch":
        from harness.onpolicy.codec import check as check_codec

        check_codec(method["codec"], method["codec_level"])
    return OnPolicyPlan(
        method=name, sync_module=module, workers=workers, steps=steps,
        training_rank=int(method["rank"] if method["rank"] is not None else cfg["model"]["rank"]),
        prompt_batch=int(task["prompt_batch"]), lr=float(op["lr"]), optimizer=str(op["optimizer"]),
        weight_decay=float(op["weight_decay"]), clip_norm=float(op["clip_norm"]), eval_every=int(op["eval_every"]),
        eval_final=bool(op["eval_final"]), eval_base=bool(op["eval_base"]), sync_dtype=str(method["sync_dtype"]),
        verify_every=int(method["verify_every"]), policy_kl=bool(op["policy_kl"]), seed=int(cfg["seed"]),
        fault_flip_step=int(op["fault_flip_step"]), fault_flip_worker=int(op["fault_flip_worker"]),
        fault_flip_target=str(op["fault_flip_target"]), compressor=compressor,
        codec=str(method["codec"]), codec_level=method["codec_level"], staleness=int(op["staleness"]),
        curve_prompts=int(op["curve_prompts"]), eval_threads=int(op["eval_threads"]))


@dataclass
class Setup:
    model: ModelConfig            # the RunPlan's typed model part
    task_plan: TaskConfig         # the RunPlan's typed task part
    plan: OnPolicyPlan
    policy: Any                   # peft.PeftModel
    replica: Replica
    task: Any                     # harness.tasks OnPolicyTask
    sync: Any                     # LearnerSync (rank 0) | WorkerSync
    method: str
    seed: int


def compressor_seed(seed: int, compressor_seed: int) -> int:
    """The compressor's seed: a function of the run seed and ``compressor.seed`` (a 63-bit mix),
    so another run seed draws other random-k indices, QSGD roundings, PowerSGD starts."""

    return derive("compressor", int(seed), int(compressor_seed))


def build_setup(plan: OnPolicyPlan, model_cfg: ModelConfig, task_cfg: TaskConfig, source: Any, role: str,
                device: str = "cpu") -> Setup:
    """Build ``role`` ("learner" | "worker") on ``device`` from the RunPlan's parts: its OnPolicyPlan,
    typed model and task, and ``model_source`` (harness.tasks.source.ModelSource: the bases are
    loaded from the folders it names, nothing is resolved from a config again)."""
    from harness.tasks import build_task, build_tokenizer, load_base, make_lora

    learner = role == "learner"
    tokenizer = build_tokenizer(model_cfg, source)
    base = load_base("student", model_cfg, task_cfg, source=source)
    policy = make_lora(base, rank=plan.training_rank, alpha=model_cfg.alpha, targets=list(model_cfg.targets),
                       init=model_cfg.lora_init, seed=plan.seed).to(device)
    if task_cfg.name == "distill" and not learner:
        task = build_task(task_cfg, tokenizer, sampler=True)   # workers only sample: no teacher needed
    else:
        teacher = None
        if task_cfg.name == "distill":
            teacher = load_base("teacher", model_cfg, task_cfg, source=source).to(device)
        task = build_task(task_cfg, tokenizer, teacher=teacher)
    params = adapter_params(policy)
    optimizer = None
    if learner or sync_methods.worker_needs_optimizer(plan.method, plan.sync_module):
        optimizer = make_optimizer(params, plan.optimizer, plan.lr, plan.weight_decay)
    replica = Replica(params, optimizer)
    comp = plan.compressor
    side = sync_methods.build(plan.method, role, replica, module=plan.sync_module, sync_dtype=plan.sync_dtype,
                       compressor_factory=comp.build if comp is not None else None,
                       error_feedback=comp.error_feedback if comp is not None else True,
                       codec=plan.codec, codec_level=plan.codec_level)
    return Setup(model_cfg, task_cfg, plan, policy, replica, task, side, plan.method, plan.seed)


def inject_fault(setup: Setup, worker: int, step: int) -> str | None:
    """Test-only fault (onpolicy.fault_flip_*): flip one bit of worker ``worker``'s state (role
    worker<i>) after it applied update ``step``. Returns what was flipped, or None."""
    p = setup.plan
    if p.fault_flip_step == step and p.fault_flip_worker == worker:
        return flip_bit(setup.replica, p.fault_flip_target)
    return None


def worker_rollouts(setup: Setup, rank: int, world_size: int, step: int) -> tuple[Any, float]:
    """Worker ``rank``'s rollouts of update ``step`` with the policy it holds now: its shard of the
    step's training prompts, sampled with the seeded stream of (seed, step, shard); (rollouts, seconds).
    The synchronous worker (loop.py) and the overlap mode's (stale.py) draw the same ones."""
    import time

    t0 = time.perf_counter()
    task_cfg, shards, shard = setup.task_plan, world_size - 1, rank - 1
    device = next(iter(setup.replica.params.values())).device
    prompts = setup.task.prompts("train", int(task_cfg.prompt_batch), setup.seed, step)
    mine = torch.tensor_split(prompts, shards)[shard].to(device)
    gen = torch.Generator(device=device).manual_seed(derive(setup.seed, "rollout", step, shard))
    setup.policy.eval()
    rollouts = setup.task.rollout(setup.policy, mine, int(task_cfg.samples_per_prompt), gen)
    return rollouts, time.perf_counter() - t0
