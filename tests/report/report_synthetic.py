"""A small synthetic results tree in the exact layout the runs write (harness.record).

Numbers are chosen so the derived metrics can be computed by hand (see EXPECTED):
on-policy scenario ``hilo_distill`` (backend tc, rates 10 and 100 Mbit/s, rank 64),
a rate x rank grid ``grid_hilo`` on backend ``model`` (one point also on ``tc``),
federated scenario ``spra_federated`` (tc), one failed and one interrupted run, and
``tables/snr.csv``. Also runnable: ``python tests/report/report_synthetic.py DIR`` writes a tree.
"""
from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path

import pandas as pd

from harness.record import Recorder, set_status, write_run_json

STEPS = 10
EVAL_EVERY = 3
FULL_BYTES = 1_000_000          # full sync payload at rank 64, per update per worker
ROUNDS = 6

# (variant, method, compressor, rank, budget, bytes/update, {rate: update_s}, {seed: final quality})
ONPOLICY = [
    ("full_sync", "full_sync", "none", 64, None, FULL_BYTES, {10: 2.0, 100: 0.5}, {0: 0.80, 1: 0.82}),
    ("lowrank_r8", "lowrank", "none", 8, None, FULL_BYTES // 8, {10: 1.0, 100: 0.45}, {0: 0.70}),
    ("hilo_spar", "hilo", "spar", 64, 0.016, 16_000, {10: 0.8, 100: 0.4}, {0: 0.78, 1: 0.76}),
    ("hilo_powersgd", "hilo", "powersgd", 64, 0.016, 20_000, {10: 0.9, 100: 0.42}, {0: 0.75}),
    ("delta_topk", "delta", "topk", 64, 0.016, 16_000, {10: 0.85, 100: 0.41}, {0: 0.60}),
]
WORKERS = 2
VERDICT = 1                     # bytes of the verification verdict per worker per update (as the learner records)
EXPECTED = {   # hand-computed, at 10 Mbit/s; bytes per worker = payload + verdict (+ resync share)
    # quality retained is per seed on paired runs (same seed), then averaged
    "hilo_spar": {"bytes_frac": (16_000 + VERDICT) / (FULL_BYTES + VERDICT), "speedup": 2.0 / 0.8,
                  "quality_retained": (0.78 / 0.80 + 0.76 / 0.82) / 2, "bytes_per_update": 16_000 + VERDICT},
    "lowrank_r8": {"bytes_frac": (FULL_BYTES // 8 + VERDICT) / (FULL_BYTES + VERDICT), "speedup": 2.0 / 1.0,
                   "quality_retained": 0.70 / 0.80},
    # powersgd: worker0 resynced with FULL_BYTES at step 4 (in_sync false there), counted in its bytes
    "hilo_powersgd": {"bytes_frac": (20_000 + VERDICT + FULL_BYTES / WORKERS / STEPS) / (FULL_BYTES + VERDICT),
                      "in_sync_frac": 9 / 10},
}
# federated: (variant, method, uplink bytes per client, client compute s, final accuracy)
FEDERATED = [
    ("fedit", "fedit", 200_000, 1.0, 0.70),
    ("ffa", "ffa", 100_000, 0.6, 0.68),
    ("spra", "spra", 100_000, 0.6, 0.74),
    ("spra_const_lr", "spra", 100_000, 0.6, 0.71),
]
RANKS = [64, 32, 16]


def _quality(final: float, step: int, last: int) -> float:
    """A saturating learning curve that ends exactly at ``final``."""
    shape = lambda t: 1 - math.exp(-(t + 1) / 3)  # noqa: E731
    return 0.1 + (final - 0.1) * shape(step) / shape(last)


def _run_dir(root: Path, scenario: str, variant: str, salt: str) -> tuple[Path, str]:
    run_id = f"{variant}-{hashlib.sha256(f'{scenario}{variant}{salt}'.encode()).hexdigest()[:8]}"
    return root / "runs" / scenario / run_id, run_id


def _meta(scenario: str, variant: str, run_id: str, backend: str, method: str, kind: str, seed: int,
          model_rank: int, status: str = "ok", reason: str = "", extra: str = "", lr_rule: str = "linear",
          sync_dtype: str = "bf16", load: dict | None = None, optimizer: str | None = None) -> dict:
    return {**({"load": load} if load else {}),"run_id": run_id, "scenario": scenario, "variant": variant, "backend": backend,
            "status": status, "reason": reason, "command": f"python -m harness scenario={scenario}{extra}",
            "git_commit": "0123abcd", "git_dirty": False, "kernel": "6.1.0", "versions": {"torch": "2.13.0"},
            "config": {"seed": seed, "model": {"name": "tiny", "rank": model_rank},
                       **({"federated": {"optimizer": optimizer}} if optimizer else {}),
                       "method": {"name": method, "kind": kind, "lr_rule": lr_rule, "resample_every": 5,
                                  "sync_dtype": sync_dtype}}}


def write_onpolicy(root: Path, scenario: str, backend: str, spec: tuple, rate: float, seed: int,
                   status: str = "ok", reason: str = "", model_rank: int = 64, workers: int = WORKERS,
                   sync_dtype: str = "bf16", update_s: float | None = None, load: dict | None = None,
                   eval_every: int = EVAL_EVERY, trace: str | None = None, staleness: int | None = None) -> Path:
    """One on-policy run, rows as harness/onpolicy/loop.py records them (learner bytes summed over links).

    ``eval_every=0`` evaluates once, at the last update (a time-only run); ``trace`` names the
    link trace (``rate`` is then its mean); ``staleness`` adds the overlap mode's column."""
    variant, method, compressor, rank, budget, nbytes, times, finals = spec
    salt = f"{backend}{rate}{seed}{model_rank}{rank}" + (f"{trace}" if trace else "")
    run_dir, run_id = _run_dir(root, scenario, variant, salt)
    extra = f" seed={seed}" + (" net.backend=model" if backend == "model" else "")
    write_run_json(run_dir, _meta(scenario, variant, run_id, backend, method, "onpolicy", seed, model_rank,
                                  "running", "", extra, sync_dtype=sync_dtype, load=load))
    keys = {"run_id": run_id, "scenario": scenario, "variant": variant, "method": method,
            "compressor": compressor, "task": "distill", "seed": seed, "backend": backend,
            "rate_mbit": float(rate), "delay_ms": 0.0, "rank": rank,
            "budget_frac": budget if budget is not None else float("nan"), **({"trace": trace} if trace else {})}
    # hilo_distill: the table's times; the grid: a link model, 5% slower on the emulated backend
    update_s = update_s or times.get(rate) or (0.3 + nbytes * 8 / (rate * 1e6)) * (1.05 if backend == "tc" else 1.0)
    resync_step = 4 if variant == "hilo_powersgd" else -1
    with Recorder(run_dir, keys, "learner", flush_every=1000) as rec:
        for step in range(STEPS):
            evaluated = (eval_every > 0 and step % eval_every == eval_every - 1) or step == STEPS - 1
            resync = FULL_BYTES if step == resync_step else 0
            per_link = nbytes + VERDICT
            measured = dict(payload_bytes_down=per_link * workers + resync, update_bytes=nbytes,
                            payload_bytes_up=4000, wire_bytes_down=int((per_link * workers + resync) * 1.05),
                            update_s=update_s, transfer_down_s=(per_link + resync) * 8 / (rate * 1e6) / 0.9,
                            rollout_s=0.1, learn_s=0.05, loss=1.0 / (step + 1), in_sync=step != resync_step,
                            resync_bytes=resync, resynced_workers=int(step == resync_step),
                            accuracy=_quality(finals[seed], step, STEPS - 1) if evaluated else float("nan"),
                            reverse_kl=1 - _quality(finals[seed], step, STEPS - 1) if evaluated else float("nan"),
                            **({"staleness": staleness} if staleness is not None else {}))
            if method == "hilo" and compressor == "spar" and scenario == "hilo_distill":
                measured["compressor_info"] = {"used_bytes": nbytes, "budget_bytes": nbytes, "ranks": {
                    f"base_model.model.model.layers.{layer}.self_attn.{m}.lora_{ab}.default.weight":
                    max(0, (step + layer * 3 + len(m) + (ab == "B")) % 6 - 1)
                    for layer in range(2) for m in ("q_proj", "v_proj", "down_proj") for ab in "AB"}}
            rec.row(step, **measured)
    for w in range(workers):
        with Recorder(run_dir, keys, f"worker{w}", flush_every=1000) as rec:
            for step in range(STEPS):
                bad = step == resync_step and w == 0
                rec.row(step, payload_bytes_down=nbytes + VERDICT + (FULL_BYTES if bad else 0), in_sync=not bad,
                        resync_bytes=FULL_BYTES if bad else 0, apply_s=0.01)
    set_status(run_dir, status, reason)
    return run_dir


def write_federated(root: Path, scenario: str, backend: str, spec: tuple, seed: int = 0,
                    optimizer: str | None = None) -> Path:
    """One federated run; ``optimizer`` goes into run.json's config (federated.optimizer) when given."""
    variant, method, up_bytes, compute_s, final = spec
    final = final[seed] if isinstance(final, dict) else final
    run_dir, run_id = _run_dir(root, scenario, variant, f"{backend}{seed}")
    lr_rule = "const" if variant.endswith("const_lr") else "linear"
    write_run_json(run_dir, _meta(scenario, variant, run_id, backend, method, "federated", seed, 64, "running",
                                  lr_rule=lr_rule, optimizer=optimizer))
    keys = {"run_id": run_id, "scenario": scenario, "variant": variant, "method": method, "compressor": "none",
            "task": "federated", "seed": seed, "backend": backend, "rate_mbit": 10.0, "delay_ms": 20.0,
            "rank": 64, "budget_frac": float("nan")}
    with Recorder(run_dir, keys, "server", flush_every=1000) as rec:   # step 0: evaluation before round 1
        rec.row(0, rank=64, ranks=RANKS, accuracy=_quality(final, 0, ROUNDS), eval_loss=1.0)
        for r in range(1, ROUNDS + 1):
            evaluated = r % 2 == 0 or r == ROUNDS
            rec.row(r, rank=64, ranks=RANKS, round_s=compute_s * 5 + up_bytes * 8 / 10e6,
                    payload_bytes_up=sum(up_bytes * k // 64 for k in RANKS), in_sync=True,
                    accuracy=_quality(final, r, ROUNDS) if evaluated else float("nan"),
                    eval_loss=1.0 / (r + 1) if evaluated else float("nan"))
    for k, rank in enumerate(RANKS):
        with Recorder(run_dir, keys, f"client{k}", flush_every=1000) as rec:
            for r in range(1, ROUNDS + 1):
                rec.row(r, rank=rank, payload_bytes_up=up_bytes * rank // 64,
                        payload_bytes_down=up_bytes * rank // 64, client_compute_s=compute_s,
                        forward_s=compute_s / 3, backward_s=compute_s * 2 / 3, in_sync=True)
    set_status(run_dir, "ok")
    return run_dir


def make_small_results(root: Path) -> Path:
    """A few runs only (full sync and HiLo + Spar at two rates, FedIT and SPRA): for the slow subprocess tests."""
    root = Path(root)
    for spec in (ONPOLICY[0], ONPOLICY[2]):
        for rate in (10, 100):
            write_onpolicy(root, "hilo_distill", "tc", (*spec[:7], {0: spec[7][0]}), rate, 0)
    for spec in (FEDERATED[0], FEDERATED[2]):
        write_federated(root, "spra_federated", "tc", spec)
    return root


def make_results(root: Path) -> Path:
    """Write the whole synthetic tree under ``root`` (which becomes a results/ folder)."""
    root = Path(root)
    for spec in ONPOLICY:
        for rate in (10, 100):
            for seed in spec[7]:
                write_onpolicy(root, "hilo_distill", "tc", spec, rate, seed)
    failed = ("hilo_randk", "hilo", "randk", 64, 0.016, 16_000, {10: 0.8, 100: 0.4}, {0: 0.5})
    write_onpolicy(root, "hilo_distill", "tc", failed, 10, 0, status="failed", reason="worker1 died: exit code 1")
    write_onpolicy(root, "hilo_distill", "tc", failed, 100, 0, status="interrupted", reason="KeyboardInterrupt")
    grid = [s for s in ONPOLICY if s[0] in ("full_sync", "hilo_spar")]
    for model_rank in (16, 64):
        for spec in grid:
            scaled = (*spec[:3], model_rank, spec[4], spec[5] * model_rank // 64, {}, spec[7])
            for rate in (1, 10, 100):
                write_onpolicy(root, "grid_hilo", "model", scaled, rate, 0, model_rank=model_rank)
            if model_rank == 64:
                write_onpolicy(root, "grid_hilo", "tc", scaled, 10, 0, model_rank=model_rank)
    for spec in FEDERATED:
        write_federated(root, "spra_federated", "tc", spec)
    (root / "tables").mkdir(parents=True, exist_ok=True)
    snr = []   # the SNR check's format: one row per module and rank
    for module, d_in in (("model.layers.0.self_attn.q_proj", 128), ("model.layers.1.mlp.down_proj", 256)):
        for i, r in enumerate([1, 2, 4, 8, 16, 32, 64]):
            theory = r / (d_in + 1)
            snr.append({"module": module, "d_out": 128, "d_in": d_in, "rank": r, "draws": 50,
                        "snr": theory * (1 + 0.05 * ((i % 3) - 1)), "snr_theory": theory, "rel_bias": 0.01})
    pd.DataFrame(snr).to_csv(root / "tables" / "snr.csv", index=False)
    return root


if __name__ == "__main__":
    print(make_results(Path(sys.argv[1] if len(sys.argv) > 1 else "results-synthetic")))


# ---------------------------------------------------------------- seeded: known means and spreads
SEEDS = [0, 1, 2, 3, 4]
SEEDED_FULL_S = {10: 2.0, 100: 0.5, 1000: 0.1}         # full sync update_s, every seed
SEEDED_SPEEDUP = {                                      # HiLo + Spar per-seed speedup at each rate
    10: [2.5, 2.6, 2.7, 2.8, 2.9],                      # interval wholly above 2.2: met
    100: [1.9, 2.3, 2.7, 2.1, 2.5],                     # mean 2.3, wide: contains 2.2, inconclusive
    1000: [0.8, 0.9, 0.7, 0.85, 0.75],                  # wholly below 2.2: not met
}
SEEDED_FULL_Q = [0.80, 0.82, 0.78, 0.81, 0.79]          # full sync final accuracy per seed
SEEDED_RETAINED = [0.99, 1.00, 1.01, 0.995, 1.005]      # HiLo + Spar accuracy / full sync's, per seed
SEEDED_LOWRANK = [0.90, 0.92, 0.88, 0.91, 0.89]         # low-rank r=1 accuracy / full sync's, per seed
SEEDED_FED = {"fedit": [0.70, 0.71, 0.69], "spra": [0.74, 0.76, 0.75]}                      # SGD
SEEDED_FED_ADAMW = {"fedit_adamw": [0.80, 0.81, 0.79], "spra_adamw": [0.70, 0.72, 0.71]}    # AdamW: spra loses
LOADED = {"start": {"loadavg": [3.5, 2.0, 1.0]}, "end": {"loadavg": [0.2, 0.5, 0.5]}, "cpus": 2,
          "roles_cpu_s": 10.0, "wall_s": 20.0}          # 1-min loadavg 3.5 > 0.5 x 2 CPUs: measured under load
IDLE = {"start": {"loadavg": [0.1, 0.1, 0.1]}, "end": {"loadavg": [0.3, 0.2, 0.1]}, "cpus": 2,
        "roles_cpu_s": 10.0, "wall_s": 20.0}


def make_seeded_results(root: Path) -> Path:
    """Five seeds of full sync, HiLo + Spar (1.5% budget) and low-rank r=1 at 10, 100, 1000 Mbit/s, and three
    seeds of FedIT and SPRA, with the per-seed values above; seed 4 of HiLo at 10 Mbit/s ran under load."""
    root = Path(root)
    full_q = dict(zip(SEEDS, SEEDED_FULL_Q))
    specs = [("full_sync", "full_sync", "none", 64, None, FULL_BYTES, full_q, None),
             ("hilo_spar", "hilo", "spar", 64, 0.015, 15_000,
              {s: q * r for s, q, r in zip(SEEDS, SEEDED_FULL_Q, SEEDED_RETAINED)}, SEEDED_SPEEDUP),
             ("lowrank_r1", "lowrank", "none", 1, None, FULL_BYTES // 64,
              {s: q * r for s, q, r in zip(SEEDS, SEEDED_FULL_Q, SEEDED_LOWRANK)}, None)]
    for rate, full_s in SEEDED_FULL_S.items():
        for i, seed in enumerate(SEEDS):      # interleaved: seeds and methods alternate, as the runner does
            for variant, method, comp, rank, budget, nbytes, finals, speedups in specs:
                update_s = full_s / speedups[rate][i] if speedups else full_s
                load = LOADED if (variant == "hilo_spar" and rate == 10 and seed == 4) else IDLE
                write_onpolicy(root, "hilo_seeds", "tc", (variant, method, comp, rank, budget, nbytes, {}, finals),
                               rate, seed, workers=1, update_s=update_s, load=load)
    for optimizer, runs in (("sgd", SEEDED_FED), ("adamw", SEEDED_FED_ADAMW)):
        for variant, accs in runs.items():
            method = variant.removesuffix("_adamw")
            for seed, acc in enumerate(accs):
                spec = (variant, method, 100_000 if method == "spra" else 200_000, 0.5 if method == "spra" else 1.0,
                        {seed: acc})
                write_federated(root, "spra_seeds", "tc", spec, seed, optimizer=optimizer)
    return root


def hilo_claim_rows(runs: dict, scenario: str, task: str, updates: int) -> pd.DataFrame:
    """Learner and worker rows of hand-built on-policy runs, the final accuracy at the last of ``updates``:
    ``runs`` maps variant -> (method, compressor, allocation, budget_frac, update_s, {seed: final accuracy})."""
    lines = []
    for variant, (method, comp, alloc, budget, update_s, seeds) in runs.items():
        for seed, acc in seeds.items():
            for step in range(updates):
                common = dict(kind="onpolicy", run_id=f"{variant}-s{seed}", step=step, scenario=scenario,
                              backend="tc", variant=variant, method=method, compressor=comp, task=task,
                              rate_mbit=10.0, delay_ms=0.0, rank=64, ref_rank=64, staleness=0, seed=seed,
                              allocation=alloc, budget_frac=budget)
                last = step == updates - 1
                lines.append({**common, "role": "learner", "update_s": update_s, "payload_bytes_down": 1000.0,
                              "accuracy": acc if last else float("nan")})
                lines.append({**common, "role": "worker0"})
    return pd.DataFrame(lines)


def hilo_claims(rows: pd.DataFrame, specs: list) -> pd.DataFrame:
    """The claims frame of ``specs`` judged on the on-policy ``rows`` alone."""
    from harness.report.claims import claims_frame
    from harness.report.metrics import onpolicy_runs, onpolicy_table
    from harness.report.tables import Tables, hilo_table

    runs = onpolicy_runs(rows)
    empty = pd.DataFrame()
    tables = Tables(hilo=hilo_table(onpolicy_table(runs=runs)), spra=empty, sweep=empty, backends=empty, hilo_runs=runs)
    return claims_frame(tables, specs)
