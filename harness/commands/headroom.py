"""Is there something to learn? Teacher, student base, and 100 LoRA updates of each task.

    python -m harness.commands.headroom [--json] [--steps 100] [model=tiny] [task.digits=2 ...]

Builds (or finds in the cache) the teacher and the student base, evaluates both on the
held-out prompts, then, in one process, trains a fresh full-rank-budget LoRA adapter on the
student for ``--steps`` updates of ``distill`` and of ``reward`` and evaluates again; last,
``--steps`` SFT batches of the ``federated`` data (4 non-IID clients, pooled in one adapter). With
``--json`` the last line is one JSON object: teacher_accuracy, student_accuracy,
distill_accuracy, distill_reverse_kl, reward_accuracy, reward_reward, student_reverse_kl,
the accuracy curves (distill_curve, reward_curve: [[update, accuracy], ...]) and seconds
(wall and CPU) per phase. The run is deterministic: same cache, same numbers. Key=value overrides apply to the model and task sections (as
``model.KEY=...`` / ``task.KEY=...``); ``model=NAME`` picks conf/model/NAME.yaml.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf

from harness.conf.schema import ModelConfig, TaskConfig

CONF = Path(__file__).resolve().parent.parent / "conf"


def load_section(group: str, name: str, overrides: list[str]):
    """conf/<group>/<name>.yaml validated against its schema, with ``<group>.key=value`` overrides."""
    schema = {"model": ModelConfig, "task": TaskConfig}[group]
    path = CONF / group / f"{name}.yaml"
    if not path.is_file():
        options = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        raise SystemExit(f"{group}: {name!r} is not allowed; choose one of {', '.join(options)}")
    data = OmegaConf.load(path)
    data.pop("defaults", None)
    cfg = OmegaConf.merge(OmegaConf.structured(schema), data)
    mine = [o[len(group) + 1:] for o in overrides if o.startswith(group + ".")]
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(mine))


def train(task, policy, steps: int, lr: float, seed: int, desc: str, every: int = 0, eval_n: int = 512,
          progress: bool = True) -> list[list[float]]:
    """``steps`` single-process updates of ``task`` on the LoRA ``policy`` (AdamW, constant lr,
    gradient norm clipped at 1). Returns the accuracy curve [[update, accuracy], ...] taken
    every ``every`` updates (0: none)."""
    from tqdm import tqdm
    from harness.progress import frames

    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    curve: list[list[float]] = []
    bar = tqdm(range(steps), desc=desc, disable=not frames(progress), leave=False)
    for step in bar:
        if every and step % every == 0:
            curve.append([step, task.evaluate(policy, eval_n)["accuracy"]])
        prompts = task.prompts("train", int(task.cfg.prompt_batch), seed, step)
        rollouts = task.rollout(policy, prompts, task.samples, gen)
        loss, metrics = task.loss(policy, rollouts)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        bar.set_postfix({k: f"{v:.3f}" for k, v in metrics.items() if k in ("loss", "reward")})
    return curve


def federated(model_cfg, task_cfg, tok, steps: int, lr: float, seed: int, clients: int = 4) -> dict[str, float]:
    """One LoRA adapter on the student, ``steps`` SFT batches taken round-robin from the
    clients' non-IID data (no aggregation: the pooled upper bound of a federated run)."""
    from harness.tasks import build_federated, load_base, make_lora

    task = build_federated(task_cfg, tok, clients, seed)
    policy = make_lora(load_base("student", model_cfg, task_cfg), model_cfg.rank, model_cfg.alpha,
                       list(model_cfg.targets), model_cfg.lora_init)
    base = task.evaluate(policy)
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    streams = [task.batches(k) for k in range(clients)]          # each client's own stream (FederatedTask.batches)
    for step in range(steps):
        loss = task.loss(policy, next(streams[step % clients]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    after = task.evaluate(policy)
    return {"base_accuracy": base["accuracy"], "base_eval_loss": base["eval_loss"], **after}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument("--steps", type=int, default=100, help="LoRA updates per task")
    parser.add_argument("--lr", type=float, default=1e-3, help="LoRA learning rate (AdamW; onpolicy.lr's default)")
    parser.add_argument("--eval", type=int, default=512, help="held-out prompts per evaluation")
    parser.add_argument("--every", type=int, default=25, help="evaluate every N updates (0: only at the end)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: a tiny model gains nothing from more)")
    parser.add_argument("overrides", nargs="*", help="model=NAME, model.KEY=V, task.KEY=V")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from harness.tasks import build_task, build_tokenizer, load_base, make_lora, pretrained

    model_name = next((o.split("=", 1)[1] for o in args.overrides if o.startswith("model=")), "tiny")
    model_cfg = load_section("model", model_name, args.overrides)
    distill_cfg = load_section("task", "distill", args.overrides)
    reward_cfg = load_section("task", "reward", args.overrides)
    out: dict = {"model": model_name, "steps": args.steps, "lr": args.lr, "eval_prompts": args.eval}
    t0, c0 = time.perf_counter(), time.process_time()
    for kind in ("teacher", "student"):
        pretrained(kind, model_cfg, distill_cfg)
    out["pretrain_s"] = round(time.perf_counter() - t0, 1)
    out["pretrain_cpu_s"] = round(time.process_time() - c0, 1)
    tok = build_tokenizer(model_cfg)
    teacher = load_base("teacher", model_cfg, distill_cfg)
    distill = build_task(distill_cfg, tok, teacher)
    reward = build_task(reward_cfg, tok)
    student = load_base("student", model_cfg, distill_cfg)
    out["teacher_accuracy"] = distill.evaluate(teacher, args.eval)["accuracy"]
    base = distill.evaluate(student, args.eval)
    out["student_accuracy"], out["student_reverse_kl"] = base["accuracy"], base["reverse_kl"]
    out["student_reward"] = reward.evaluate(student, args.eval)["reward"]
    for name, task in (("distill", distill), ("reward", reward)):
        t = time.perf_counter()
        policy = make_lora(load_base("student", model_cfg, distill_cfg), model_cfg.rank, model_cfg.alpha,
                           list(model_cfg.targets), model_cfg.lora_init)
        curve = train(task, policy, args.steps, args.lr, args.seed, f"{name} x{args.steps}", args.every, args.eval)
        out[f"{name}_train_s"] = round(time.perf_counter() - t, 1)
        for key, value in task.evaluate(policy, args.eval).items():
            out[f"{name}_{key}"] = value
        out[f"{name}_curve"] = curve + [[args.steps, out[f"{name}_accuracy"]]]
    t = time.perf_counter()
    out.update({f"federated_{k}": v for k, v in federated(model_cfg, load_section("task", "federated", args.overrides),
                                                         tok, args.steps, args.lr, args.seed).items()})
    out["federated_train_s"] = round(time.perf_counter() - t, 1)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["cpu_seconds"] = round(time.process_time() - c0, 1)
    print(f"headroom  model={model_name}  digits={distill_cfg.digits} ops={''.join(distill_cfg.ops)}  "
          f"rank={model_cfg.rank}  {args.steps} updates at lr {args.lr}  ({args.eval} held-out prompts)")
    print(f"  teacher accuracy            {out['teacher_accuracy']:.3f}")
    print(f"  student base accuracy       {out['student_accuracy']:.3f}   reverse KL {out['student_reverse_kl']:.3f}")
    print(f"  after distill               {out['distill_accuracy']:.3f}   reverse KL {out['distill_reverse_kl']:.3f}"
          f"   ({out['distill_train_s']} s)")
    print(f"  after reward                {out['reward_accuracy']:.3f}   reward {out['reward_reward']:.3f}"
          f"   ({out['reward_train_s']} s)")
    print(f"  federated SFT (pooled)      {out['federated_base_accuracy']:.3f} -> {out['federated_accuracy']:.3f}"
          f"   eval loss {out['federated_base_eval_loss']:.3f} -> {out['federated_eval_loss']:.3f}"
          f"   ({out['federated_train_s']} s)")
    for name in ("distill", "reward"):
        print(f"  {name} accuracy by update   " + "  ".join(f"{int(s)}:{a:.2f}" for s, a in out[f"{name}_curve"]))
    print(f"  total {out['seconds']} s wall, {out['cpu_seconds']} s CPU "
          f"(pretraining {out['pretrain_s']} s wall, {out['pretrain_cpu_s']} s CPU)")
    if args.json:
        print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
