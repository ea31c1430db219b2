"""The headline claims, judged from their 95% intervals over seeds (never from one run).

Each claim is one ``ClaimSpec`` in ``SPECS``: which per-seed statistic, which threshold
and direction, the rule in words, and a ``find`` function that yields, for every place
the results allow judging it, ``(where, {seed: value}, note)``. A new claim is one entry.
``where`` is a ``Where``, built by ``_where`` only: the scenario label, then the model the
configuration's runs trained (their ``model``, harness.report.collect.model_label of run.json),
then the link and what the line compares against; claims.csv's ``model`` column is that same
model. A claim group never mixes models: on-policy configurations are grouped per scenario,
backend and model, federated ones per scenario, backend, model and client optimizer.
Per-seed values are paired ratios or differences (same seed on both sides,
harness/report/aggregate.py); harness/report/stats.py turns them into an estimate, a
t-interval, a verdict in {met, not met, inconclusive} and the seeds that would resolve an
inconclusive one.

Setup (per on-policy scenario that evaluates its base model, ``onpolicy.eval_base``): full sync's
final accuracy exceeds the base model's, so the comparisons below are between runs that learn.
HiLo (per on-policy scenario and backend; HiLo + Spar at the scenario's training rank, at
the budget closest to 1.6%; bytes and speedup only against a bf16 full sync):
- bytes per update <= 1.6% of full sync: *by construction* (the budget is a config value
  the compressor may not exceed); reported as "configured budget / achieved";
- update speedup >= 2.2x vs full sync, at **every** link rate measured;
- quality within 2% of full sync (per-seed retained accuracy >= 0.98), at the slowest rate;
- on distillation, the same on the objective itself: full sync's mean reverse KL to the teacher over
  HiLo's, per seed, >= 0.98 (a continuous score beside the 0/1 accuracy; reward tasks have none apart
  from accuracy, so no line);
- quality within 2% of low-rank training at (about) equal bytes: low-rank at its smallest
  rank (r=1 ships what Spar ships at 1.6% of r=64), same seed, same rate.
- the quality comparison at equal wall-clock time, at every rate: HiLo's quality over full
  sync's when the faster of the two finishes, and HiLo's time to 95% of full sync's final
  quality over full sync's own time to it (harness/report/metrics.py, "Horizons").
Horizons: every line's ``horizon`` says which horizon its verdict uses: ``per update`` (bytes,
speedup: means over every update of the run), ``equal updates`` (the final evaluation after the
run's N updates, with whether the better of the two methods had plateaued by then: the 95%
interval of its per-seed slope over the last PLATEAU_EVALS evaluations reaches 0; when it has
not, the verdict measures a per-update lag at that horizon, not where the methods end up),
``equal wall-clock`` (when the faster finishes; time to 95%), ``final round`` / ``per round``
(federated).
SPRA-LoRA (per federated scenario, backend and client optimizer: the SGD ``spra`` is judged
against the SGD baselines, ``spra_adamw`` against the ``*_adamw`` ones, each in its own rows
whose ``where`` names the optimizer; the reference is the variant named ``spra`` /
``spra_<optimizer>``, else one with the linear rate rule; FedIT ratios pair with the FedIT of
the same optimizer): uplink <= 50% of FedIT; client compute <= 50% of FedIT in two labelled
readings, the whole client step (FLOPs when recorded, else isolated compute time, else compute
time) and LoRA's own FLOPs (what the adapter adds over the frozen model's forward and backward,
harness.federated.flops.adapter_flops; runs that predate the column give no row); higher final accuracy than
**each** baseline (paired per-seed difference > 0, one row per baseline); rank-aware
(linear) lr beats the constant-lr ablation.

Verdicts (harness/report/inference.py states the statistics): each claim names its reading in
``test``: ``non-inferiority`` ("within 2%": the 95% interval's lower end above the margin; the
``equivalence`` column gives the TOST reading, the 90% interval inside [0.98, 1.02]),
``superiority`` (a difference above 0), ``bound`` (a mean above or below a threshold, e.g. the
speedup) or ``cap`` (a limit on every value: judged on the largest value observed, which is the
estimate, with no interval). ``verdict`` is the claim's own; ``verdict_holm`` the same after Holm's
adjustment over the whole table (``p_two``, ``p_holm``). ``supported`` says what the data support
at 95% whatever the threshold (the interval's end on the claim's side: "HiLo keeps >= 96.1% of full
sync's quality"). ``seeds_80`` is the number of seeds that would give 80% power to resolve an
inconclusive claim in the direction its estimate points (``resolves``), at the observed per-seed
sd. A time-to-target whose seeds never reached the target is censored at the run's end
(``censored``: "k of n"), never dropped. Where per-prompt records pair the two sides, ``boot_low``
and ``boot_high`` give the two-level (seeds x prompts) bootstrap interval beside the seed-level
t-interval that the verdict uses (``interval`` names it). Lines with fewer than 2 seeds are not
claims (no interval): claims.csv leaves them out; ``claims_frame(...).attrs["unjudged_lines"]`` lists
each with why (the finder's note, e.g. no measured point at the
equal time, else too few seeds), which the summary and the report's output print.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from harness.report import claims_hilo as H
from harness.report import claims_spra as S
from harness.report.aggregate import seed_of
from harness.report.bootstrap import two_level
from harness.report.claimkit import Found, Line, Where
from harness.report.inference import (cap_verdict, censored_verdict, holm, holm_verdict, p_values, seeds_for_power,
                                      supported_bound, tost, two_sided)
from harness.report.metrics import ONPOLICY_KEYS, WALLCLOCK_TARGET, synchronous
from harness.report.stats import INCONCLUSIVE, crossover, summarize
from harness.report.tables import Tables

HILO_BYTES, HILO_SPEEDUP, HILO_RETAINED = H.HILO_BYTES, H.HILO_SPEEDUP, H.HILO_RETAINED
SPRA_UPLINK, SPRA_COMPUTE = S.SPRA_UPLINK, S.SPRA_COMPUTE
EQUIVALENCE = (0.98, 1.02)       # the TOST bounds of a "within 2%" ratio
COLUMNS = ["method", "claim", "where", "model", "horizon", "test", "estimate", "ci_low", "ci_high", "sd", "n_seeds",
           "seeds", "rule", "verdict", "verdict_holm", "p_two", "p_holm", "supported", "equivalence", "seeds_80",
           "resolves", "censored", "interval", "boot_low", "boot_high", "threshold", "direction", "statistic", "note"]


@dataclass(frozen=True)
class ClaimSpec:
    method: str                  # HiLo | SPRA-LoRA
    claim: str                   # the claim as the paper states it
    statistic: str               # what each seed contributes (a per-run column or a paired difference)
    threshold: float
    direction: str               # ">=" or "<=": the side of the threshold the claim wants
    rule: str                    # how the verdict is reached, in words
    find: Callable[[Tables], Found]
    horizon: str = ""            # which horizon the verdict uses, when find() does not say it per line
    test: str = "bound"          # non-inferiority | superiority | bound | cap (harness/report/inference.py)
    equivalence: bool = False    # also read as equivalence (TOST within EQUIVALENCE)


INTERVAL = "95% t-interval of the per-seed values"
SPECS = [
    ClaimSpec("full sync", "held-out quality improves on the base model (the run is long enough to learn)",
              "quality - base quality", 0.0, ">=",
              f"per-seed final accuracy minus the base model's (the adapter before update 0, same held-out prompts); "
              f"met when the whole {INTERVAL} is > 0", H.full_sync_learns, test="superiority"),
    ClaimSpec("HiLo", "bytes per update <= 1.6% of full sync (a cap on every update)",
              "bytes_frac_max", HILO_BYTES, "<=",
              "the largest single update's bytes over the same seed's bf16 full sync's bytes per update, over every "
              "update of every seed; met when that maximum is <= 1.6% (a cap holds on every value, not on a mean)",
              H.hilo_bytes, "every update", test="cap"),
    ClaimSpec("HiLo", "update speedup >= 2.2x vs full sync", "speedup", HILO_SPEEDUP, ">=",
              f"per-seed full-sync update_s / HiLo update_s at this rate; met when the whole {INTERVAL} is > 2.2",
              H.hilo_speedup, "per update (mean over the run)"),
    ClaimSpec("HiLo", "quality within 2% of full sync", "quality_retained", HILO_RETAINED, ">=",
              f"per-seed final accuracy / same seed's full sync; met when the whole {INTERVAL} is > 0.98 "
              "(non-inferiority)", H.hilo_quality, test="non-inferiority", equivalence=True),
    ClaimSpec("HiLo", "distillation objective within 2% of full sync (reverse KL to the teacher)",
              "full sync reverse KL / reverse KL", HILO_RETAINED, ">=",
              f"per-seed full sync's mean reverse KL to the teacher / this run's (lower is better, so the ratio reads "
              f"as quality kept), on the same held-out prompts; met when the whole {INTERVAL} is > 0.98 "
              "(non-inferiority; the margin is the accuracy claim's)", H.hilo_objective, test="non-inferiority",
              equivalence=True),
    ClaimSpec("HiLo", "quality within 2% of low-rank training at equal bytes", "quality / lowrank quality",
              HILO_RETAINED, ">=",
              f"per-seed final accuracy / same seed's low-rank (smallest rank), HiLo at the budget nearest the low-rank "
              f"run's bytes; met when the whole {INTERVAL} is > 0.98 (non-inferiority)", H.hilo_equal_bytes,
              test="non-inferiority", equivalence=True),
    ClaimSpec("HiLo", "quality within 2% of full sync at equal wall-clock time", "quality_retained_equal_time",
              HILO_RETAINED, ">=",
              f"per-seed accuracy / same seed's full sync, each read at its last evaluation at or before the time the "
              f"faster of the two finishes (measured points, nothing drawn between evaluations); met when the whole "
              f"{INTERVAL} is > 0.98 (non-inferiority)", H.hilo_equal_time, test="non-inferiority", equivalence=True),
    ClaimSpec("HiLo", f"reaches {WALLCLOCK_TARGET:.0%} of full sync's final quality no later than full sync",
              "time_to_95_vs_full", 1.0, "<=",
              f"per-seed time of the first evaluation at or above {WALLCLOCK_TARGET:.0%} of the same seed's full-sync "
              f"final accuracy, over full sync's own; a seed that never gets there is censored at its run's end (a lower "
              f"bound: never 'met' while one is censored); met when the whole {INTERVAL} is < 1", H.hilo_time_to_95,
              f"equal wall-clock: time to {WALLCLOCK_TARGET:.0%} of full sync's final quality"),
    ClaimSpec("HiLo (compressors)", "quality within 2% of full sync, another compressor at HiLo's budget",
              "quality_retained", HILO_RETAINED, ">=",
              f"per-seed final accuracy of HiLo with this compressor / same seed's full sync; met when the whole "
              f"{INTERVAL} is > 0.98 (non-inferiority)", H.hilo_other_compressors, test="non-inferiority",
              equivalence=True),
    ClaimSpec("HiLo (compressors)", "Spar beats another compressor at the same budget", "accuracy difference", 0.0,
              ">=", f"per-seed final accuracy of HiLo + Spar minus HiLo with this compressor (same seed, rate, rank and "
              f"budget); met when the whole {INTERVAL} is > 0 (Spar is better), not met when it is < 0",
              H.hilo_spar_vs_compressors, test="superiority"),
    ClaimSpec("SPRA-LoRA", "uplink <= 50% of FedIT", "uplink_frac_vs_fedit", SPRA_UPLINK, "<=",
              f"per-seed uplink bytes/round over the same seed's FedIT; met when the whole {INTERVAL} is < 0.5",
              S.spra_uplink, "per round (mean over the run)"),
    ClaimSpec("SPRA-LoRA", "client compute <= 50% of FedIT (reading 1: the whole client step)",
              "compute_frac_vs_fedit", SPRA_COMPUTE, "<=",
              f"per-seed client compute over the same seed's FedIT; met when the whole {INTERVAL} is < 0.5",
              S.spra_compute, "per round (mean over the run)"),
    ClaimSpec("SPRA-LoRA", "client compute <= 50% of FedIT (reading 2: LoRA's own FLOPs over the frozen model's "
              "forward and backward)", "adapter_frac_vs_fedit", SPRA_COMPUTE, "<=",
              f"per-seed adapter FLOPs over the same seed's FedIT; met when the whole {INTERVAL} is < 0.5",
              S.spra_adapter_compute, "per round (mean over the run)"),
    ClaimSpec("SPRA-LoRA", "higher final accuracy than every baseline", "accuracy - baseline accuracy", 0.0, ">=",
              f"per-seed accuracy difference to this baseline (same seed); met when the whole {INTERVAL} is > 0",
              S.spra_beats_baselines, "final round", test="superiority"),
    ClaimSpec("SPRA-LoRA", "rank-aware (linear) lr beats constant lr", "accuracy - const-lr accuracy", 0.0, ">=",
              f"per-seed accuracy difference to the const-lr ablation; met when the whole {INTERVAL} is > 0",
              S.spra_lr_rule, "final round", test="superiority"),
    ClaimSpec("SPRA-LoRA", "at equal uplink the freed budget buys accuracy (SPRA at 2x each rank vs FedIT)",
              "accuracy - FedIT accuracy", 0.0, ">=",
              f"per-seed accuracy of spra_equal_uplink minus fedit (same uplink bytes); met when the whole {INTERVAL} is > 0",
              S.spra_versus("spra_equal_uplink", "fedit"), "final round", test="superiority"),
    ClaimSpec("SPRA-LoRA", "rank-aware lr beats constant lr with A's variance fixed at 1/r_ref (the SNR argument alone)",
              "accuracy - const-lr accuracy", 0.0, ">=",
              f"per-seed accuracy of spra_aref_linear minus spra_aref_const; met when the whole {INTERVAL} is > 0",
              S.spra_versus("spra_aref_linear", "spra_aref_const"), "final round", test="superiority"),
    ClaimSpec("SPRA-LoRA", "periodic resampling of A helps (T=5 vs never)", "accuracy - no-resample accuracy", 0.0,
              ">=", f"per-seed accuracy of spra minus spra_no_resample; met when the whole {INTERVAL} is > 0",
              S.spra_versus("spra", "spra_no_resample"), "final round", test="superiority"),
]
# Spar's allocation (beyond the paper, docs/compress.md "Allocation"): each variant against the default, energy
for _at, (_alloc, _what) in enumerate((("normalized", "energy normalised per matrix"),
                                      ("preconditioned", "the energy of the Adam step (the learner's replicated state)")),
                                     start=next(i for i, s in enumerate(SPECS) if s.method == "SPRA-LoRA")):
    SPECS.insert(_at, ClaimSpec(
        "HiLo (ablation)", f"allocation ablation: {_alloc} ({_what}) vs energy", "accuracy difference", 0.0, ">=",
        f"per-seed final accuracy of HiLo + Spar with allocation={_alloc} minus energy's (same seed, rate, budget); "
        f"'met' when the whole {INTERVAL} is > 0 (the variant is better)", H.hilo_allocation(_alloc),
        test="superiority"))
# SPRA's aggregation (beyond the paper, docs/federated.md "Aggregation"): product (sum_k p_k dW_k) against the
# column average, each lr rule, at 12 rounds and at 36; and the rank rule under each aggregation at 36 rounds
for _mine, _theirs, _what, _rounds in (
        ("spra_product", "spra", "product vs column aggregation, linear lr", 12),
        ("spra_product_const_lr", "spra_const_lr", "product vs column aggregation, constant lr", 12),
        ("spra_product", "spra_product_const_lr", "linear vs constant lr under product aggregation", 12),
        ("spra_product_r36", "spra_r36", "product vs column aggregation, linear lr", 36),
        ("spra_product_const_lr_r36", "spra_const_lr_r36", "product vs column aggregation, constant lr", 36),
        ("spra_r36", "spra_const_lr_r36", "linear vs constant lr under column aggregation", 36),
        ("spra_product_r36", "spra_product_const_lr_r36", "linear vs constant lr under product aggregation", 36)):
    SPECS.append(ClaimSpec(
        "SPRA-LoRA (ablation)", f"aggregation ablation: {_what} ({_rounds} rounds)", "accuracy difference", 0.0, ">=",
        f"per-seed accuracy of {_mine} minus {_theirs}; 'met' when the whole {INTERVAL} is > 0 (the first is better)",
        S.spra_versus(_mine, _theirs), f"final round ({_rounds} rounds)", test="superiority"))


def prompt_scores(prompts: pd.DataFrame | None, pairs: dict | None,
                  column: str = "correct") -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b): seeds x prompts of ``column`` at each paired run's final evaluation (the learner's or the
    server's own policy), or None where the records do not pair prompt by prompt."""
    if not pairs or prompts is None or prompts.empty or column not in prompts:
        return None
    runs = {str(r) for pair in pairs.values() for r in pair}
    own = prompts[prompts["run_id"].astype(str).isin(runs) & prompts["view"].astype(str).isin(["learner", "server"])]
    finals = {str(rid): g[g["step"] == g["step"].max()].sort_values("prompt") for rid, g in own.groupby("run_id")}
    a, b = [], []
    for seed in sorted(pairs, key=str):
        mine, theirs = (finals.get(str(r)) for r in pairs[seed])
        if mine is None or theirs is None or not np.array_equal(mine["prompt"].to_numpy(), theirs["prompt"].to_numpy()):
            return None
        a.append(pd.to_numeric(mine[column]).to_numpy(dtype=float))
        b.append(pd.to_numeric(theirs[column]).to_numpy(dtype=float))
    if len(a) < 2 or len({len(x) for x in a}) != 1:
        return None
    return np.vstack(a), np.vstack(b)


def judge(spec: ClaimSpec, *found, prompts: pd.DataFrame | None = None) -> dict:
    """One claims.csv line from a finder's ``Line`` (or its plain tuple): the estimate, interval and
    verdict of the claim's test, what the data support, the power to resolve it, and the two-level
    bootstrap where per-prompt records pair the two sides (module doc)."""
    line = found[0] if len(found) == 1 and isinstance(found[0], Line) else Line(*found)
    if not isinstance(line.where, Where):
        raise TypeError(f"{spec.claim}: where {line.where!r} is not built by claimkit._where (it names the model)")
    per_seed, cap = line.per_seed, spec.test == "cap"
    n_cens = len(set(line.censored) & set(per_seed))
    if cap:
        s = summarize(per_seed.values())
        v, p_met, p_not = cap_verdict(per_seed.values(), spec.threshold), math.nan, math.nan
    else:
        v, s = censored_verdict(per_seed, set(line.censored), spec.threshold, spec.direction)
        p_met, p_not = p_values(s, spec.threshold, spec.direction)
        if n_cens:      # bounds in place of values: the side they cannot show is not tested
            p_met, p_not = (1.0, p_not) if spec.direction == "<=" else (p_met, 1.0)
    estimate = max(per_seed.values()) if cap and per_seed else s.mean
    gap = s.mean - spec.threshold
    need = seeds_for_power(gap, s.sd) if v == INCONCLUSIVE and not cap and not n_cens else math.nan
    toward = ("met" if (gap > 0) == (spec.direction == ">=") else "not met") if need == need else ""
    scores = None if cap else prompt_scores(prompts, line.pairs, line.column)
    boot = two_level(*scores, op=line.op) if scores is not None else (math.nan, math.nan)
    interval = "" if cap else "95% t over seeds" + ("; beside it the bootstrap over seeds x prompts"
                                                     if boot[0] == boot[0] else "")
    return {"method": spec.method, "claim": spec.claim, "where": line.where.text, "model": line.where.model,
            "horizon": spec.horizon if line.horizon is None else line.horizon, "test": spec.test,
            "estimate": estimate, "ci_low": math.nan if cap else s.ci_low, "ci_high": math.nan if cap else s.ci_high,
            "sd": s.sd, "n_seeds": s.n, "seeds": ",".join(str(k) for k in per_seed), "rule": spec.rule, "verdict": v,
            "p_two": two_sided(p_met, p_not), "_p_met": p_met, "_p_not": p_not,
            "supported": estimate if cap else supported_bound(s, spec.direction),
            "equivalence": tost(s, *EQUIVALENCE) if spec.equivalence and not n_cens else "",
            "seeds_80": need, "resolves": toward, "censored": f"{n_cens} of {s.n}" if n_cens else "",
            "interval": interval, "boot_low": boot[0], "boot_high": boot[1], "threshold": spec.threshold,
            "direction": spec.direction, "statistic": spec.statistic, "note": line.note}


TOO_FEW = "fewer than 2 seeds: no interval (run >= 3 seeds)"


def claims_frame(tables: Tables, specs: list[ClaimSpec] | None = None) -> pd.DataFrame:
    """Every claim the results allow judging (>= 2 seeds), HiLo first (claims.csv), with the
    Holm-adjusted verdicts over the whole table; ``attrs["unjudged_lines"]``: lines left out (n < 2), with why."""
    prompts = getattr(tables, "prompts", None)
    lines = [judge(spec, *found, prompts=prompts) for spec in (specs or SPECS) for found in spec.find(tables)]
    kept = [x for x in lines if x["n_seeds"] >= 2]
    for x, p in zip(kept, holm([x["p_two"] for x in kept])):
        p_met, p_not = x.pop("_p_met"), x.pop("_p_not")
        x["p_holm"] = p
        x["verdict_holm"] = x["verdict"] if x["test"] == "cap" else holm_verdict(p, p_met, p_not)
    frame = pd.DataFrame(kept, columns=COLUMNS)
    frame.attrs["unjudged_lines"] = [{"method": x["method"], "claim": x["claim"], "where": x["where"],
                                      "n_seeds": x["n_seeds"], "why": x["note"] or TOO_FEW}
                                     for x in lines if x["n_seeds"] < 2]
    return frame


def crossover_frame(tables: Tables) -> pd.DataFrame:
    """Per on-policy method (not full sync) with >= 2 rates: the rate where speedup = 1, per seed, then summarised.

    Interpolated linearly in log rate (harness.report.stats.crossover). ``side`` says where the
    speedup lies when some seed never crosses ("above": faster at every measured rate).
    A method is the same across rates when everything but the rate and the variant's name
    agrees (a scenario names its variants per rate: hilo_spar_10mbit, hilo_spar_100mbit);
    ``variants`` lists the names a row joins.
    """
    runs = tables.hilo_runs
    keys = [k for k in ONPOLICY_KEYS if k not in ("rate_mbit", "variant", "steps")]   # speedup is per update
    cols = keys + ["variants", "crossover_mbit", "ci_low", "ci_high", "sd", "n_seeds", "sides", "rates"]
    if runs.empty or "speedup" not in runs:
        return pd.DataFrame(columns=cols)
    data = runs[((runs["method"] != "full_sync") | ~synchronous(runs)) & runs["speedup"].notna()]  # stale full sync too
    data = data.assign(_seed=lambda f: seed_of(f))
    lines = []
    for group, g in data.groupby(keys, dropna=False, sort=True):
        if g["rate_mbit"].nunique() < 2:
            continue
        per_seed, sides = {}, []
        for seed, s in g.groupby("_seed"):
            points = s.groupby("rate_mbit")["speedup"].mean()
            x = crossover(list(points.index), list(points.to_numpy()))
            per_seed[seed] = x
            sides.append("crosses" if math.isfinite(x) else "above" if (points > 1).all()
                         else "below" if (points < 1).all() else "mixed")
        s = summarize(per_seed.values())
        lines.append({**dict(zip(keys, group)), "variants": ",".join(sorted(g["variant"].unique())),
                      "crossover_mbit": s.mean, "ci_low": s.ci_low, "ci_high": s.ci_high,
                      "sd": s.sd, "n_seeds": s.n, "sides": ",".join(sorted(set(sides))),
                      "rates": ",".join(f"{r:g}" for r in sorted(g["rate_mbit"].unique()))})
    return pd.DataFrame(lines, columns=cols)
