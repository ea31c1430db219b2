"""Weight-update sparsity in bf16 (PULSE's premise, arXiv 2602.03839) measured on LoRA.

    python -m harness.commands.sparsity                        # default sweep, ~3 min on 1 core idle
    python -m harness.commands.sparsity --lrs 5e-4 --seeds 0 --steps 10     # a quick look
    python -m harness.commands.sparsity scenario=hilo_reward   # another scenario's task (Hydra overrides)

What it measures: the fraction of the adapter's bf16 entries whose bits are unchanged between
adapter version t-k and version t (version 0 = the initialisation, version t = after update t),
for k = 1 (what a ``patch`` sync ships at every update) and k = 2, 4, 8 (what a worker k
updates stale would need: only the two ends matter, an entry that moved and came back is not
shipped). Per module group: LoRA A vs B, attention (q/k/v/o_proj) vs MLP (gate/up/down_proj),
and all of them; over a learning-rate sweep that reaches full-parameter RL rates (1e-6).

How: one process, one thread, the real task of the scenario (default hilo_distill: tiny student
and teacher from the pretraining cache, LoRA r=64 on all 7 projections, AdamW, gradient clipped
to onpolicy.clip_norm, task.prompt_batch x task.samples_per_prompt rollouts per update). The
rollouts are sampled from the adapter rounded to bf16, what full_sync (bf16) and patch workers
hold, so this is exactly the trajectory of those two methods, without the links: it measures
the optimizer trajectory, not the network. Every (seed, lr) run starts from the same seeded
adapter and sees the same prompts per update; seeds change the adapter init and sampling.

Output: a tidy CSV (one row per seed, lr, update, k, group: ``entries``, ``unchanged``,
``unchanged_frac``; for the whole adapter also ``patch_bytes``, the size of the ``patch`` payload
from version t-k to version t with zstd level 3, and ``dense_zstd_bytes``, every bf16 entry of
version t zstd-coded at level 3: a full sync with the same codec, the fair dense control), by default results/tables/sparsity.csv, a summary table on stdout (mean
over seeds of each run's mean over the second half of its updates, sd, n, 95% t-interval), and
the plot of harness.report.sparsity_plot (results/plots/sparsity.png and .pdf).
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.onpolicy import codec as codecs
from harness.onpolicy.patch import bf16_bits, encode

LRS = (1e-3, 5e-4, 1e-4, 1e-5, 1e-6)
KS = (1, 2, 4, 8)
ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Group:
    """A set of adapter tensors: ``matrix`` A | B | all, ``block`` attn | mlp | all."""
    matrix: str
    block: str

    def holds(self, name: str) -> bool:
        matrix = "A" if ".lora_A." in name else "B" if ".lora_B." in name else "?"
        block = "attn" if any(f".{m}." in name for m in ATTN) else "mlp" if any(f".{m}." in name for m in MLP) else "?"
        return self.matrix in ("all", matrix) and self.block in ("all", block)


GROUPS = tuple(Group(m, b) for m in ("all", "A", "B") for b in ("all", "attn", "mlp"))


def unchanged_rows(history: list[dict[str, torch.Tensor]], update: int, ks: tuple[int, ...]) -> list[dict]:
    """Rows of ``update`` (history[-1] is version ``update``; history[-1-k] is version update-k)."""
    rows = []
    now = history[-1]
    dense = len(codecs.compress(b"".join(t.numpy().tobytes() for t in now.values()), "zstd", 3))
    for k in ks:
        if k >= len(history):
            continue
        then = history[-1 - k]
        same = {n: int((now[n] == then[n]).sum()) for n in now}
        changes = [(torch.nonzero(now[n] != then[n]).view(-1), now[n][now[n] != then[n]]) for n in now]
        nbytes = len(encode(changes, sum(t.numel() for t in now.values()), "zstd", 3)[0])
        for g in GROUPS:
            names = [n for n in now if g.holds(n)]
            if not names:
                continue
            entries = sum(now[n].numel() for n in names)
            unchanged = sum(same[n] for n in names)
            rows.append(dict(update=update, k=k, matrix=g.matrix, block=g.block, entries=entries,
                             unchanged=unchanged, unchanged_frac=unchanged / entries,
                             patch_bytes=nbytes if g == Group("all", "all") else float("nan"),
                             dense_zstd_bytes=dense if g == Group("all", "all") else float("nan")))
    return rows


def run_one(cfg: dict, lr: float, seed: int, steps: int, ks: tuple[int, ...], task, teacher_free_policy) -> list[dict]:
    """Train the scenario's adapter for ``steps`` updates at ``lr`` from seed ``seed``; its rows."""
    from harness.onpolicy.mismatch import swapped
    from harness.seeds import derive
    from harness.onpolicy.state import adapter_params, make_optimizer
    from harness.tasks import make_lora
    from harness.tasks.plans import model_plan

    model, task_cfg, op = model_plan(cfg["model"]), cfg["task"], cfg["onpolicy"]
    torch.manual_seed(seed)
    policy = make_lora(teacher_free_policy(), rank=int(cfg["method"]["rank"] or model.rank),
                       alpha=model.alpha, targets=list(model.targets), init=model.lora_init, seed=seed)
    params = adapter_params(policy)
    opt = make_optimizer(params, op["optimizer"], lr, float(op["weight_decay"]))
    history = [{n: bf16_bits(p) for n, p in params.items()}]
    rows = []
    for step in range(steps):
        prompts = task.prompts("train", int(task_cfg["prompt_batch"]), seed, step)
        gen = torch.Generator().manual_seed(derive(seed, "rollout", step, 0))
        view = {n: history[-1][n].view(torch.bfloat16).float().view(p.shape) for n, p in params.items()}
        policy.eval()
        with swapped(params, view):                  # sample as a full_sync (bf16) / patch worker
            rollouts = task.rollout(policy, prompts, int(task_cfg["samples_per_prompt"]), gen)
        policy.train()
        loss, _ = task.loss(policy, rollouts)
        loss.backward()
        if float(op.get("clip_norm", 0.0)) > 0:
            torch.nn.utils.clip_grad_norm_(list(params.values()), float(op["clip_norm"]))
        opt.step()
        opt.zero_grad(set_to_none=True)
        history.append({n: bf16_bits(p) for n, p in params.items()})
        history = history[-(max(ks) + 1):]
        for r in unchanged_rows(history, step + 1, ks):
            rows.append(dict(seed=seed, lr=lr, loss=float(loss.detach()), **r))
    return rows


def measure(cfg: dict, lrs: tuple[float, ...], seeds: tuple[int, ...], steps: int,
            ks: tuple[int, ...] = KS, progress: bool = True):
    """Every (seed, lr) run's rows as a DataFrame (columns: see the module docstring)."""
    import pandas as pd
    from tqdm import tqdm

    from harness.tasks import build_task, build_tokenizer, load_base

    model_cfg, task_cfg = cfg["model"], cfg["task"]
    tok = build_tokenizer(model_cfg)
    teacher = load_base("teacher", model_cfg, task_cfg) if task_cfg["name"] == "distill" else None
    task = build_task(task_cfg, tok, teacher=teacher)
    rows = []
    bar = tqdm(total=len(lrs) * len(seeds), desc="sparsity runs", disable=not progress)
    for seed in seeds:
        for lr in lrs:
            rows += run_one(cfg, lr, seed, steps, ks, task, lambda: load_base("student", model_cfg, task_cfg))
            bar.update()
    bar.close()
    df = pd.DataFrame(rows)
    df.insert(0, "task", task_cfg["name"])
    df.insert(1, "model", model_cfg["name"])
    df.insert(2, "rank", int(cfg["method"].get("rank") or model_cfg["rank"]))
    df.insert(3, "optimizer", cfg["onpolicy"]["optimizer"])
    return df


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def main(argv: list[str] | None = None) -> int:
    from omegaconf import OmegaConf

    from harness.errors import ConfigError
    from harness.paths import project_root
    from harness.compose import compose_config

    ap = argparse.ArgumentParser(prog="python -m harness.commands.sparsity", description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="*", help="Hydra overrides (default: scenario=hilo_distill)")
    ap.add_argument("--lrs", type=_floats, default=LRS, help="comma-separated learning rates")
    ap.add_argument("--seeds", type=_ints, default=(0, 1, 2), help="comma-separated seeds (>= 3 for an interval)")
    ap.add_argument("--steps", type=int, default=16, help="updates per run")
    ap.add_argument("--ks", type=_ints, default=KS, help="staleness k (updates between the compared versions)")
    ap.add_argument("--out", type=Path, default=None, help="CSV path (default results/tables/sparsity.csv)")
    ap.add_argument("--plot", type=Path, default=None, help="plot path without suffix (default results/plots/sparsity)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.steps < 1 or not args.lrs or not args.seeds or not args.ks or min(args.ks) < 1:
            raise ConfigError(f"--steps/--lrs/--seeds/--ks: {args.steps}/{args.lrs}/{args.seeds}/{args.ks}; "
                              "need steps >= 1, at least one lr and seed, every k >= 1")
        if any(lr <= 0 for lr in args.lrs):
            raise ConfigError(f"--lrs: {args.lrs} must all be > 0")
        overrides = args.overrides if any(o.startswith("scenario=") for o in args.overrides) else \
            ["scenario=hilo_distill", *args.overrides]
        cfg = OmegaConf.to_container(compose_config(overrides), resolve=True)
        if cfg["task"]["name"] not in ("distill", "reward"):
            raise ConfigError(f"task.name: {cfg['task']['name']!r} is not an on-policy task; use distill or reward")
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    root = project_root()
    out = args.out or root / "results" / "tables" / "sparsity.csv"
    plot = args.plot or root / "results" / "plots" / "sparsity"
    t0 = time.perf_counter()
    df = measure(cfg, args.lrs, args.seeds, args.steps, args.ks, progress=not args.no_progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    from harness.report.sparsity_plot import summary

    table = summary(df)
    print(f"[sparsity] {len(args.seeds)} seeds x {len(args.lrs)} lrs x {args.steps} updates in "
          f"{time.perf_counter() - t0:.0f} s; rows: {out}")
    print("unchanged fraction of bf16 entries (mean over seeds of the mean over updates "
          f"{args.steps // 2 + 1}..{args.steps}; +- 95% t-interval, n seeds):")
    show = table[table.block == "all"]
    for (lr, k), part in show.groupby(["lr", "k"], sort=False):
        cells = "  ".join(f"{r.matrix}={r.mean:.4f}+-{r.ci95:.4f}" for r in part.itertuples())
        late = df[(df.lr == lr) & (df.k == k) & (df["update"] > args.steps // 2) & df.patch_bytes.notna()]
        print(f"  lr={lr:g} k={k}: {cells} (n={part.n.iloc[0]}); patch bytes {late.patch_bytes.mean():,.0f} "
              f"(dense bf16 + zstd {late.dense_zstd_bytes.mean():,.0f})")
    from harness.report.sparsity_plot import plot_sparsity

    for path in plot_sparsity(df, plot):
        print(f"[sparsity] plot: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
