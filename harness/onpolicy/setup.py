"""What every on-policy role builds from the run config: the policy (student base + LoRA),
its replica (adapter tensors + optimizer where needed), the task, and its side of the sync.

Every process builds the adapter from the same seed (``seed``), so all replicas start
identical; the loop checks that before the first update. The run seed reaches everything
random: LoRA init (here), training prompts and sampling (roles), and the compressor's own
randomness, seeded by ``compressor_seed(seed, compressor.seed)`` (every process alike). The learner alone loads the
teacher (distill) and always holds an optimizer; workers hold one only when the method
replays steps (hilo).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from harness.onpolicy import sync as syncs
from harness.onpolicy.state import Replica, SyncError, adapter_params, flip_bit, make_optimizer


@dataclass
class Setup:
    cfg: dict                     # the resolved run config (plain dict)
    policy: Any                   # peft.PeftModel
    replica: Replica
    task: Any                     # harness.tasks OnPolicyTask
    sync: Any                     # LearnerSync (rank 0) | WorkerSync
    method: str
    seed: int


def compressor_seed(seed: int, compressor_seed: int) -> int:
    """The compressor's seed: a function of the run seed and ``compressor.seed`` (a 63-bit mix),
    so another run seed draws other random-k indices, QSGD roundings, PowerSGD starts."""
    from harness.tasks.onpolicy import mix_seed

    return mix_seed("compressor", int(seed), int(compressor_seed))


def compressor_factory(comp: dict) -> Callable[[], Any]:
    """A function building the configured compressor, without error feedback (the sync method
    decides where a residual lives); every process calls it alike."""
    from harness.compress import build_from_config

    return lambda: build_from_config({**comp, "error_feedback": False})


def training_rank(cfg: dict) -> int:
    """method.rank (lowrank) wins over model.rank."""
    return int(cfg["method"].get("rank") or cfg["model"]["rank"])


def build_setup(cfg: dict, role: str, device: str = "cpu") -> Setup:
    """Build ``role`` ("learner" | "worker") from the config on ``device``."""
    from harness.tasks import build_task, build_tokenizer, load_base, make_lora

    method, model_cfg, task_cfg, op = cfg["method"], cfg["model"], cfg["task"], cfg["onpolicy"]
    seed = int(cfg.get("seed", 0))
    name = method["name"]
    if name not in syncs.METHODS:
        raise SyncError(f"method.name: {name!r} is not an on-policy method; use one of {', '.join(syncs.METHODS)}")
    if int(task_cfg["prompt_batch"]) < int(op["workers"]):
        raise SyncError(f"task.prompt_batch: {task_cfg['prompt_batch']} prompts cannot be sharded over "
                        f"{op['workers']} workers (onpolicy.workers); use prompt_batch >= workers")
    learner = role == "learner"
    tokenizer = build_tokenizer(model_cfg)
    base = load_base("student", model_cfg, task_cfg)
    policy = make_lora(base, rank=training_rank(cfg), alpha=model_cfg.get("alpha"),
                       targets=list(model_cfg["targets"]), init=model_cfg.get("lora_init", "default"),
                       seed=seed).to(device)
    if task_cfg["name"] == "distill" and not learner:
        from harness.tasks import OnPolicyTask   # workers only sample: no teacher needed

        task = OnPolicyTask(task_cfg, tokenizer)
    else:
        teacher = load_base("teacher", model_cfg, task_cfg).to(device) if task_cfg["name"] == "distill" else None
        task = build_task(task_cfg, tokenizer, teacher=teacher)
    params = adapter_params(policy)
    optimizer = None
    if learner or syncs.worker_needs_optimizer(name):
        optimizer = make_optimizer(params, op["optimizer"], float(op["lr"]), float(op["weight_decay"]))
    replica = Replica(params, optimizer)
    comp = {**cfg["compressor"], "seed": compressor_seed(seed, int(cfg["compressor"].get("seed", 0)))}
    side = syncs.build(name, role, replica, sync_dtype=method.get("sync_dtype", "bf16"),
                       compressor_factory=compressor_factory(comp) if name in ("delta", "hilo") else None,
                       error_feedback=bool(comp.get("error_feedback", True)))
    return Setup(cfg, policy, replica, task, side, name, seed)


def inject_fault(setup: Setup, worker: int, step: int) -> str | None:
    """Test-only fault (onpolicy.fault_flip_*): flip one bit of worker ``worker``'s state (role
    worker<i>) after it applied update ``step``. Returns what was flipped, or None."""
    op = setup.cfg["onpolicy"]
    if int(op.get("fault_flip_step", -1)) == step and int(op.get("fault_flip_worker", 1)) == worker:
        return flip_bit(setup.replica, str(op.get("fault_flip_target", "param")))
    return None
