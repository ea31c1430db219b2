"""Learning-rate sweep of the federated methods, in one process (not a test; a dev tool).

    PYTHONPATH=. .venv/bin/python tests/federated/lr_sweep.py [--lrs 0.0003 0.001 0.003 0.01] \\
        [--seeds 0 1] [--scenario spra_federated] [key=value ...]

Runs every variant of the scenario (the real server and client loops, threads joined by
queues: no processes, no links, so the training math only) for each learning rate and
seed, and prints one JSON line per run and a table: final eval_loss and accuracy per
variant and lr (mean over seeds). Used to pick the per-method learning rates of
scenarios/spra_federated.yaml (docs/federated.md).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.record import read_rows  # noqa: E402
from harness.run import _merge_overrides, compose_config  # noqa: E402
from tests.federated.fakes import run_in_threads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lrs", type=float, nargs="+", default=[0.0003, 0.001, 0.003, 0.01])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--scenario", default="spra_federated")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    from harness.tasks import build_federated, build_tokenizer, load_base

    base_over = [f"scenario={args.scenario}", *args.overrides]
    variants = dict(compose_config(base_over).variants)
    lines = []
    for seed in args.seeds:
        task = base = None
        for name, extra in variants.items():
            if args.only and name not in args.only:
                continue
            for lr in args.lrs:
                over = _merge_overrides(base_over + [f"seed={seed}"], [*extra, f"federated.lr={lr}"])
                cfg = OmegaConf.to_container(compose_config(over), resolve=True)
                if base is None:
                    tok = build_tokenizer(cfg["model"])
                    base = load_base("student", cfg["model"], cfg["task"], progress=False)
                    task = build_federated(cfg["task"], tok, int(cfg["federated"]["clients"]), seed)
                with tempfile.TemporaryDirectory() as tmp:
                    run_in_threads(cfg, Path(tmp), task=task, base=base)
                    rows = read_rows(tmp)
                server = rows[rows.role == "server"].dropna(subset=["eval_loss"]).sort_values("step")
                line = {"variant": name, "lr": lr, "seed": seed, "eval_loss": float(server.eval_loss.iloc[-1]),
                        "accuracy": float(server.accuracy.iloc[-1]),
                        "curve": [round(float(x), 3) for x in server.accuracy]}
                print(json.dumps(line), flush=True)
                lines.append(line)
    table = pd.DataFrame(lines).groupby(["variant", "lr"])[["eval_loss", "accuracy"]].mean().unstack("lr")
    print(table.round(3).to_string())


if __name__ == "__main__":
    main()
