"""How noisy is SPRA's projected gradient? SNR of G A^T A against G, as a function of rank r.

    python -m harness.commands.snr [--json] [--draws 400] [--ranks 1 2 4 8 16 32 64] [key=value ...]

With A frozen, one SGD step on B moves W by ``-eta s^2 G A^T A`` instead of ``-eta G``: a
random projection of the full gradient G (d_out x d_in). With our convention
(projection.py) A is r x d_in with entries N(0, 1/r), so ``E[A^T A] = I`` and the projected
gradient is unbiased. Its signal-to-noise ratio is

    SNR(r) = ||E[G A^T A]||_F^2 / E ||G A^T A - E[G A^T A]||_F^2
           = ||G||_F^2 / E ||G A^T A - G||_F^2           (E[G A^T A] = G)

estimated over ``draws`` independent A (the seeded draws every party would use) with the
known mean G; the bias check ``||mean_i(G A_i^T A_i) - G|| / ||G||`` is recorded next to
what pure noise gives, ``sqrt(1 / (draws * SNR))`` (unbiased: the two agree). For
Gaussian A the exact value is ``r / (d_in + 1)`` whatever G (E[(A^T A)^2] = (1 + (d_in+1)/r) I),
so the claim "SNR grows linearly in r" predicts a log-log slope of 1; we measure it on the
task's real gradients: G is the gradient of the federated task's loss (one batch of client
0's data) with respect to each chosen target weight of the student base model.

Writes ``results/tables/snr.csv`` (one row per module and rank) and
``results/plots/snr_vs_rank.png`` / ``.pdf``; prints the fitted slope per module.

``--operating``: the regime SPRA actually runs in. One A is shared by every client for T
rounds of E local steps, so the projection noise of those steps does not average out;
only resampling does. On the clients' real gradients (each client's own batch stream,
rounds x E steps, weighted as the server averages) the SNR of the horizon's projected
update is measured over seeded draws next to its closed form (:func:`operating_closed_form`),
per period T and rank: ``results/tables/snr_operating.csv``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm
from harness.progress import frames

from harness.federated.projection import client_a, draw
from harness.paths import results_root

DEFAULT_RANKS = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_MODULES = ("model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj",
                   "model.layers.1.mlp.up_proj")


def task_gradients(overrides: list[str], modules: list[str], seed: int) -> dict[str, torch.Tensor]:
    """G = dL/dW for each named weight of the student base, on one batch of the federated task."""
    from omegaconf import OmegaConf

    from harness.compose import compose_config
    from harness.tasks import build_federated, build_tokenizer, load_base

    cfg = OmegaConf.to_container(compose_config(["method=spra", "task=federated", *overrides]), resolve=True)
    tok = build_tokenizer(cfg["model"])
    model = load_base("student", cfg["model"], cfg["task"])
    task = build_federated(cfg["task"], tok, int(cfg["federated"]["clients"]), seed)
    weights = dict(model.named_parameters())
    missing = [m for m in modules if f"{m}.weight" not in weights]
    if missing:
        names = sorted(n[:-7] for n in weights if n.endswith("_proj.weight"))
        raise SystemExit(f"--modules: {missing[0]!r} is not a weight of the model; choose from {', '.join(names)}")
    for m in modules:
        weights[f"{m}.weight"].requires_grad_(True)
    gen = torch.Generator().manual_seed(seed)
    batch = next(task.batches(0, int(cfg["task"]["batch_size"]), gen))
    model.train()
    task.loss(model, batch).backward()
    return {m: weights[f"{m}.weight"].grad.detach().double().clone() for m in modules}


def measure(g: torch.Tensor, module: str, ranks: list[int], draws: int, seed: int) -> list[dict]:
    """SNR of G A^T A for each rank over ``draws`` seeded draws of A (module docstring)."""
    d_out, d_in = g.shape
    signal = float(g.pow(2).sum())
    rows = []
    for r in ranks:
        noise, mean = 0.0, torch.zeros_like(g)
        for i in range(draws):
            a = client_a(draw(seed, i, f"snr/{module}", r, d_in), r).double()
            p = (g @ a.t()) @ a
            noise += float((p - g).pow(2).sum())
            mean += p
        mean /= draws
        rows.append({"module": module, "d_out": d_out, "d_in": d_in, "rank": r, "draws": draws,
                     "snr": signal / (noise / draws), "snr_theory": r / (d_in + 1),
                     "rel_bias": float((mean - g).norm() / g.norm()),
                     "rel_bias_expected": (noise / draws / signal / draws) ** 0.5})
    return rows


def period_sums(round_sums: list[torch.Tensor], period: int) -> list[torch.Tensor]:
    """Sum the rounds' gradients over each projection period of ``period`` rounds (0: one period)."""
    step = len(round_sums) if period <= 0 else period
    return [torch.stack(round_sums[i:i + step]).sum(0) for i in range(0, len(round_sums), step)]


def operating_closed_form(round_sums: list[torch.Tensor], period: int, rank: int) -> float:
    """SNR of the horizon's projected update with one Gaussian A per period (closed form).

    With M_p the gradient summed over period p (its rounds' E local steps of every client,
    weighted as the server averages), the update over the horizon moves W along
    ``sum_p M_p A_p^T A_p``; A_p independent, E[A^T A] = I and E||M (A^T A - I)||^2 =
    ||M||^2 (d_in + 1) / r for any M, so

        SNR = ||sum_p M_p||^2 r / ((d_in + 1) sum_p ||M_p||^2).

    One A for the whole horizon (period 0) gives r / (d_in + 1) however many steps; P
    periods with aligned gradients give up to P times that: resampling is what averages
    the projection noise out, local steps under one A do not.
    """
    sums = period_sums(round_sums, period)
    d_in = sums[0].shape[1]
    total = torch.stack(sums).sum(0)
    return float(total.pow(2).sum()) * rank / ((d_in + 1) * sum(float(m.pow(2).sum()) for m in sums))


def measure_operating(round_sums: list[torch.Tensor], module: str, period: int, ranks: list[int], draws: int,
                      seed: int) -> list[dict]:
    """SNR of ``sum_p M_p A_p^T A_p`` against ``sum_p M_p`` over ``draws`` seeded draws of the A_p."""
    sums = period_sums(round_sums, period)
    signal_m = torch.stack(sums).sum(0)
    signal = float(signal_m.pow(2).sum())
    d_in = signal_m.shape[1]
    rows = []
    for r in ranks:
        noise = 0.0
        for i in range(draws):
            total = torch.zeros_like(signal_m)
            for p, m in enumerate(sums):
                a = client_a(draw(seed, i * 1000 + p, f"snr-op/{module}", r, d_in), r).double()
                total += (m @ a.t()) @ a
            noise += float((total - signal_m).pow(2).sum())
        rows.append({"module": module, "rank": r, "period": period, "rounds": len(round_sums), "periods": len(sums),
                     "draws": draws, "snr": signal / (noise / draws),
                     "snr_closed_form": operating_closed_form(round_sums, period, r),
                     "snr_one_step": r / (d_in + 1)})
    return rows


def client_round_gradients(overrides: list[str], modules: list[str], seed: int, rounds: int,
                           local_steps: int) -> dict[str, list[torch.Tensor]]:
    """Per round, the clients' real gradients summed over their E local steps, weighted as the server averages.

    Gradients are taken at the student base on each client's own successive batches (the
    batches its local training would draw), for every round of the horizon: the clients'
    real gradient directions, without the drift of W along the trajectory (first order).
    """
    from omegaconf import OmegaConf

    from harness.compose import compose_config
    from harness.tasks import build_federated, build_tokenizer, load_base

    cfg = OmegaConf.to_container(compose_config(["method=spra", "task=federated", *overrides]), resolve=True)
    clients = int(cfg["federated"]["clients"])
    tok = build_tokenizer(cfg["model"])
    model = load_base("student", cfg["model"], cfg["task"])
    task = build_federated(cfg["task"], tok, clients, seed)
    weights = dict(model.named_parameters())
    for m in modules:
        weights[f"{m}.weight"].requires_grad_(True)
    sizes = [float(len(task.client_data(k))) for k in range(clients)]
    shares = [w / sum(sizes) for w in sizes]
    streams = []
    for k in range(clients):
        streams.append(task.batches(k, int(cfg["task"]["batch_size"])))   # the stream client k trains on (client.py)
    model.train()
    out: dict[str, list[torch.Tensor]] = {m: [] for m in modules}
    for _ in range(rounds):
        acc = {m: 0.0 for m in modules}
        for k in range(clients):
            for _ in range(local_steps):
                model.zero_grad(set_to_none=True)
                task.loss(model, next(streams[k])).backward()
                for m in modules:
                    acc[m] = acc[m] + shares[k] * weights[f"{m}.weight"].grad.detach().double()
        for m in modules:
            out[m].append(acc[m].clone())
    return out


def slope(frame: pd.DataFrame) -> float:
    """Least-squares slope of log SNR against log r."""
    return float(np.polyfit(np.log(frame["rank"].to_numpy(float)), np.log(frame["snr"].to_numpy(float)), 1)[0])


def plot(table: pd.DataFrame, slopes: dict[str, float], out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for module, t in table.groupby("module", sort=False):
        short = module.removeprefix("model.")
        line, = ax.plot(t["rank"], t["snr"], "o-", label=f"{short} (d_in={t['d_in'].iloc[0]}, slope {slopes[module]:.3f})")
        ax.plot(t["rank"], t["snr_theory"], ":", color=line.get_color())
    ax.set(xscale="log", yscale="log", xlabel="rank r", ylabel="SNR of G A^T A",
           title="Projected-gradient SNR vs rank (dotted: r/(d_in+1))")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "snr_vs_rank.png", out / "snr_vs_rank.pdf"]
    for p in paths:
        fig.savefig(p, dpi=150)
    plt.close(fig)
    return paths


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m harness.commands.snr", description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=list(DEFAULT_RANKS))
    parser.add_argument("--draws", type=int, default=400, help="independent A per rank (more: tighter estimate)")
    parser.add_argument("--modules", nargs="+", default=list(DEFAULT_MODULES), help="weights (names without .weight)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: the project's results/)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--operating", action="store_true",
                        help="the operating regime: one A per period of T rounds of E local steps, on the clients' "
                             "real gradients (writes results/tables/snr_operating.csv)")
    parser.add_argument("--rounds", type=int, default=12, help="--operating: horizon in rounds")
    parser.add_argument("--local-steps", type=int, default=5, help="--operating: E")
    parser.add_argument("--periods", type=int, nargs="+", default=[1, 3, 5, 0],
                        help="--operating: resampling periods T in rounds (0: one A for the horizon)")
    parser.add_argument("overrides", nargs="*", help="config overrides, e.g. model.hidden_size=256")
    args = parser.parse_args(argv)
    if args.draws < 2 or any(r < 1 for r in args.ranks):
        parser.error(f"--draws {args.draws} must be >= 2 and --ranks {args.ranks} >= 1")
    if args.operating:
        return operating_main(args, argv)
    grads = task_gradients(args.overrides, args.modules, args.seed)
    rows = []
    for module, g in tqdm(grads.items(), desc="snr", unit="module", disable=not frames(not args.json)):
        if max(args.ranks) > min(g.shape):
            parser.error(f"--ranks: {max(args.ranks)} exceeds {module}'s smallest dimension {min(g.shape)}")
        rows += measure(g, module, args.ranks, args.draws, args.seed)
    table = pd.DataFrame(rows)
    slopes = {m: slope(t) for m, t in table.groupby("module", sort=False)}
    root = args.out or results_root()
    (root / "tables").mkdir(parents=True, exist_ok=True)
    table.to_csv(root / "tables" / "snr.csv", index=False)
    plots = plot(table, slopes, root / "plots")
    summary = {"command": "python -m harness.commands.snr " + " ".join(argv if argv is not None else sys.argv[1:]),
               "slopes": slopes, "slope_mean": float(np.mean(list(slopes.values()))),
               "max_rel_error_vs_theory": float((table["snr"] / table["snr_theory"] - 1).abs().max()),
               "max_rel_bias": float(table["rel_bias"].max()),
               "csv": str(root / "tables" / "snr.csv"), "plots": [str(p) for p in plots]}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        for m, s in slopes.items():
            print(f"log-log slope of SNR vs r, {m}: {s:.3f} (claim: 1, linear)")
        print(f"wrote {summary['csv']} and {', '.join(summary['plots'])}")
    return summary


def operating_main(args: argparse.Namespace, argv: list[str] | None) -> dict:
    """SNR in the operating regime for every module, period T and rank; CSV + printed table."""
    grads = client_round_gradients(args.overrides, args.modules, args.seed, args.rounds, args.local_steps)
    rows = []
    for module, seq in grads.items():
        for period in args.periods:
            rows += measure_operating(seq, module, period, args.ranks, args.draws, args.seed)
    table = pd.DataFrame(rows)
    root = args.out or results_root()
    (root / "tables").mkdir(parents=True, exist_ok=True)
    path = root / "tables" / "snr_operating.csv"
    table.to_csv(path, index=False)
    summary = {"command": "python -m harness.commands.snr " + " ".join(argv if argv is not None else sys.argv[1:]),
               "max_rel_error_vs_closed_form": float((table["snr"] / table["snr_closed_form"] - 1).abs().max()),
               "csv": str(path)}
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        print(f"wrote {path}")
    return summary


if __name__ == "__main__":
    main()
