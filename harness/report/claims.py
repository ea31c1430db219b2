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
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import numpy as np
import pandas as pd

from harness.report.aggregate import ident, seed_of
from harness.report.metrics import (FEDERATED_KEYS, KEY_DEFAULTS, ONPOLICY_KEYS, PLATEAU_EVALS, WALLCLOCK_TARGET,
                                    constant_links, plateau, synchronous)
from harness.report.stats import INCONCLUSIVE, crossover, seeds_needed, summarize, verdict
from harness.report.tables import Tables

HILO_BYTES, HILO_SPEEDUP, HILO_RETAINED = 0.016, 2.2, 0.98
DEFAULT_ALLOCATION = "energy"          # compressor.options.allocation of the paper's Spar
SPRA_UPLINK, SPRA_COMPUTE = 0.5, 0.5
COLUMNS = ["method", "claim", "where", "model", "horizon", "estimate", "ci_low", "ci_high", "sd", "n_seeds", "seeds",
           "rule", "verdict", "seeds_to_resolve", "threshold", "direction", "statistic", "note"]
Found = Iterator[tuple]   # (Where, {seed: value}, note) or (Where, {seed: value}, note, horizon)


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


def values(runs: pd.DataFrame, config: pd.Series, keys: list[str], column: str) -> dict:
    """{seed: value of ``column``} over the runs of one configuration (NaN values dropped); a key that
    a hand-built table lacks (``model``) holds its default (metrics.KEY_DEFAULTS) on that side."""
    def keyed(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(**{k: KEY_DEFAULTS.get(k, np.nan) for k in keys if k not in frame})

    mine = runs[ident(keyed(runs), keys) == ident(keyed(config.to_frame().T), keys).iloc[0]]
    vals = pd.to_numeric(mine[column], errors="coerce") if column in mine else pd.Series(dtype=float)
    return {s: float(v) for s, v in zip(seed_of(mine), vals) if math.isfinite(v)}


def diff(a: dict, b: dict) -> dict:
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def ratio(a: dict, b: dict) -> dict:
    return {s: a[s] / b[s] for s in sorted(set(a) & set(b)) if b[s] != 0}


# ---------------------------------------------------------------- HiLo
def _spar_configs(tables: Tables) -> Iterator[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """(scenario [backend] label, HiLo+Spar configurations at the training rank, that scenario's table)."""
    for label, t in _onpolicy_groups(tables):
        spar = t[(t["method"] == "hilo") & (t["compressor"] == "spar") & (t["rank"] == t["ref_rank"])
                 & (_allocation(t) == DEFAULT_ALLOCATION)]         # the paper's Spar; the others are its ablation
        if spar.empty:
            continue
        budgets = spar["budget_frac"].dropna()
        if len(budgets):   # the claim is at 1.6%: the budget closest to it
            spar = spar[spar["budget_frac"] == budgets.iloc[int(np.argmin(np.abs(budgets - HILO_BYTES)))]]
        yield label, spar.sort_values(["ref_rank", "rate_mbit"]), t


def _onpolicy_groups(tables: Tables, *columns: str) -> Iterator[tuple[str, pd.DataFrame]]:
    """(scenario [backend] label, its on-policy configurations of one model on constant links in the
    synchronous loop: the paper's loop, where the claims are judged); ``columns``: only when the table
    has them. Two models' runs of one scenario (``model=...`` on the command line) are two groups."""
    hilo = tables.hilo
    if hilo.empty or any(c not in hilo for c in columns):
        return
    hilo = hilo[constant_links(hilo) & synchronous(hilo)]
    for (scenario, backend, _), t in hilo.groupby(["scenario", "backend", _models(hilo)], sort=True):
        yield f"{scenario} [{backend}]", t


def _model(value) -> str:
    """A configuration's ``model`` as text ("" when it names none: a hand-built table without the column)."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _models(t: pd.DataFrame) -> pd.Series:
    """Each configuration's ``_model`` (all "" in a table without the column)."""
    if "model" not in t:
        return pd.Series("", index=t.index, name="model")
    return t["model"].map(_model).rename("model")


def _allocation(t: pd.DataFrame) -> pd.Series:
    """Each configuration's Spar allocation; tables without the column (or runs before it) hold the default."""
    if "allocation" not in t:
        return pd.Series(DEFAULT_ALLOCATION, index=t.index)
    return t["allocation"].astype(object).where(t["allocation"].notna(), "").astype(str).replace(
        {"": DEFAULT_ALLOCATION, "nan": DEFAULT_ALLOCATION})


def _same_horizon(t: pd.DataFrame, r: pd.Series) -> pd.Series:
    """Configurations of ``t`` run for as many updates as ``r`` (``steps``; all, for tables without it)."""
    if "steps" not in t or pd.isna(r.get("steps")):
        return pd.Series(True, index=t.index)
    return t["steps"] == r["steps"]


class Where(NamedTuple):
    """Where a claim was measured (claims.csv's ``where``) and the model it rests on (its ``model``)."""
    text: str
    model: str

    def then(self, more: str) -> "Where":
        """The same place with more said after it (``, vs fedit``); the model stays the one it names."""
        return Where(self.text + more, self.model)


def _where(label: str, r: pd.Series, vs: str | None = None, tail: str | None = None) -> Where:
    """The one place a claim's ``where`` is built: ``label`` (``scenario [backend]``), the model of the
    configuration ``r`` (its runs' ``model``: keys pick the runs, so the two agree), then for an
    on-policy line the rate, training rank and what it is compared with (``vs``; default: ``r``'s full
    sync and its dtype), for a federated one ``tail`` (its ranks and client optimizer). E.g.
    ``hilo_real [tc] SmolLM2-135M-Instruct (real) 10 Mbit/s, r=16, vs full_sync_10mbit bf16``."""
    model = _model(r.get("model"))
    head = f"{label} {model}" if model else label
    if tail is not None:
        return Where(f"{head} {tail}", model)
    dtype = str(r.get("baseline_dtype") or "")
    vs = vs or f"{r['baseline_variant']}{' ' + dtype if dtype else ''}"
    return Where(f"{head} {r['rate_mbit']:g} Mbit/s, r={int(r['rank'])}, vs {vs}", model)


def _fair(r: pd.Series) -> str:
    dtype = str(r.get("baseline_dtype") or "")
    return "" if dtype in ("", "nan", "bf16") else f"vs {dtype} full sync: not the claim's bf16 baseline"


def hilo_bytes(tables: Tables) -> Found:
    for label, spar, _ in _spar_configs(tables):
        longest = spar.sort_values("updates", ascending=False, kind="stable") if "updates" in spar else spar
        for _, r in longest.groupby("ref_rank").head(1).iterrows():   # the rate does not set the bytes; the
            # longest run averages over the most updates (an update whose gradient is zero ships the header only)
            budget = r["budget_frac"]
            note = (f"by construction: configured budget {budget:.2%} / achieved {r['bytes_frac']:.4%}"
                    if budget == budget else f"achieved {r['bytes_frac']:.4%} (no budget configured)")
            fair = _fair(r)
            per_seed = {} if fair else values(tables.hilo_runs, r, ONPOLICY_KEYS, "bytes_frac")
            if per_seed:     # the bound holds per seed; the interval is the mean's, and can reach past it
                note += f"; largest seed {max(per_seed.values()):.4%}"
            yield _where(label, r), per_seed, fair or note


def hilo_speedup(tables: Tables) -> Found:
    for label, spar, _ in _spar_configs(tables):
        for _, r in spar.iterrows():
            fair = _fair(r)
            yield _where(label, r), ({} if fair else values(tables.hilo_runs, r, ONPOLICY_KEYS, "speedup")), fair


def _baseline(t: pd.DataFrame, r: pd.Series) -> pd.Series | None:
    """The full-sync configuration ``r`` was paired with (its ``baseline_variant``) at its rate."""
    hit = t[(t["variant"].astype(str) == str(r.get("baseline_variant") or "").split(";")[0])
            & (t["rate_mbit"] == r["rate_mbit"])]
    return hit.iloc[0] if len(hit) else None


def equal_updates(tables: Tables, r: pd.Series, full: pd.Series | None, names: tuple[str, str] = ("HiLo", "full sync")) -> str:
    """The ``horizon`` of an equal-updates verdict: the updates, and whether the better of ``r`` (HiLo)
    and ``full`` (its full sync; ``names`` says what the two are) by mean final quality had plateaued
    (metrics.plateau) by then."""
    updates = values(tables.hilo_runs, r, ONPOLICY_KEYS, "updates")
    text = f"equal updates: final evaluation after {int(max(updates.values(), default=0))} updates"

    def mean_quality(side: tuple[pd.Series, str]) -> float:
        q = list(values(tables.hilo_runs, side[0], ONPOLICY_KEYS, "quality").values())
        return float(np.mean(q)) if q else -math.inf

    sides = [(r, names[0])] + ([(full, names[1])] if full is not None else [])
    better, name = max(sides, key=mean_quality)
    flat, s = plateau(values(tables.hilo_runs, better, ONPOLICY_KEYS, "final_slope").values())
    if s.n < 2:
        return f"{text}; plateau not judged (the slope over the last {PLATEAU_EVALS} evaluations needs >= 2 seeds)"
    word = "plateaued" if flat else "NOT plateaued (still rising: a per-update lag at this horizon)"
    return (f"{text}; {name} {word}: slope over the last {PLATEAU_EVALS} evaluations {s.mean:+.3f}/100 updates, "
            f"95% CI [{s.ci_low:+.3f}, {s.ci_high:+.3f}]")


def _scored(t: pd.DataFrame) -> pd.DataFrame:
    """The configurations that measured a quality: a timing-only run (``onpolicy.eval_final=false``)
    has none, so it enters the bytes and speedup claims but never a quality claim."""
    return t[pd.to_numeric(t["quality"], errors="coerce").notna()] if "quality" in t else t.iloc[:0]


def _horizons(spar: pd.DataFrame) -> pd.DataFrame:
    """One configuration per training rank and horizon (``steps``), at its slowest rate, of those that
    measured a quality: in the synchronous loop quality does not depend on the rate, but it does on
    the updates run."""
    spar = _scored(spar)
    return spar.groupby([c for c in ("ref_rank", "steps") if c in spar], dropna=False, sort=False).head(1)


def hilo_quality(tables: Tables) -> Found:
    for label, spar, t in _spar_configs(tables):
        for _, r in _horizons(spar).iterrows():
            yield (_where(label, r), values(tables.hilo_runs, r, ONPOLICY_KEYS, "quality_retained"), "",
                   equal_updates(tables, r, _baseline(t, r)))


def hilo_equal_time(tables: Tables) -> Found:
    """Quality at equal wall-clock time: HiLo's over full sync's when the faster finishes, per rate."""
    for label, spar, _ in _spar_configs(tables):
        for _, r in _scored(spar).iterrows():
            per_seed = values(tables.hilo_runs, r, ONPOLICY_KEYS, "quality_retained_equal_time")
            at = values(tables.hilo_runs, r, ONPOLICY_KEYS, "equal_time_s")
            horizon = (f"equal wall-clock: when the faster finishes (mean {np.mean(list(at.values())):.1f} s)"
                       if at else "equal wall-clock: when the faster finishes")
            fair = _fair(r)
            yield _where(label, r), ({} if fair else per_seed), fair, horizon


def hilo_time_to_95(tables: Tables) -> Found:
    """Time to 95% of full sync's final quality, HiLo's over full sync's own, per rate."""
    for label, spar, _ in _spar_configs(tables):
        for _, r in _scored(spar).iterrows():
            fair = _fair(r)
            mine = values(tables.hilo_runs, r, ONPOLICY_KEYS, "time_to_95_vs_full")
            note = "" if mine else f"HiLo or full sync never reached {WALLCLOCK_TARGET:.0%} of full sync's final quality"
            yield _where(label, r), ({} if fair else mine), fair or note


def hilo_equal_bytes(tables: Tables) -> Found:
    for label, spar, t in _spar_configs(tables):
        first = _scored(spar).groupby("ref_rank").head(1).index
        for i, r in _horizons(spar).iterrows():
            horizon = equal_updates(tables, r, _baseline(t, r))
            low = t[(t["method"] == "lowrank") & (t["rate_mbit"] == r["rate_mbit"]) & (t["ref_rank"] == r["ref_rank"])
                    & _same_horizon(t, r)]
            if low.empty and i not in first:        # another horizon without its low-rank run: nothing to say
                continue
            if low.empty:
                yield _where(label, r, "low-rank (no run)"), {}, "no low-rank run at this rate: not measured", horizon
                continue
            lo = low.sort_values("rank").iloc[0]
            mine = values(tables.hilo_runs, r, ONPOLICY_KEYS, "quality")
            theirs = values(tables.hilo_runs, lo, ONPOLICY_KEYS, "quality")
            note = (f"low-rank r={int(lo['rank'])} ships {lo['bytes_frac']:.2%} of full sync, "
                    f"HiLo+Spar {r['bytes_frac']:.2%}")
            yield _where(label, r, f"low-rank r={int(lo['rank'])}"), ratio(mine, theirs), note, horizon


def full_sync_learns(tables: Tables) -> Found:
    """Full sync's final quality minus the base model's (``onpolicy.eval_base``), per scenario and
    horizon: whether the run is long enough to learn anything (a run that learns nothing measures nothing)."""
    for label, t in _onpolicy_groups(tables, "base_quality"):
        full = t[(t["method"] == "full_sync") & pd.to_numeric(t["base_quality"], errors="coerce").notna()]
        for _, r in _horizons(full.sort_values(["ref_rank", "rate_mbit"])).iterrows():
            gain = values(tables.hilo_runs, r, ONPOLICY_KEYS, "gain_over_base")
            note = f"base {r['base_quality']:.3f} ({r['quality_metric']}), full sync {r['quality']:.3f}"
            yield (_where(label, r, "the base model"), gain, note,
                   f"equal updates: after {int(r['steps'])} updates" if pd.notna(r.get("steps")) else None)


def hilo_allocation(allocation: str) -> Callable[[Tables], Found]:
    """Spar's allocation ablation (docs/compress.md "Allocation"; beyond the paper): per on-policy
    scenario, the per-seed final accuracy of HiLo + Spar with ``allocation`` minus that of the default
    (energy) at the same rate, training rank and budget, where both ran."""
    def find(tables: Tables) -> Found:
        for label, spar, t in _spar_configs(tables):
            for _, r in _scored(spar).iterrows():
                other = t[(t["method"] == "hilo") & (t["compressor"] == "spar") & (_allocation(t) == allocation)
                          & (t["rate_mbit"] == r["rate_mbit"]) & (t["rank"] == r["rank"])
                          & (t["budget_frac"] == r["budget_frac"]) & _same_horizon(t, r)]
                if other.empty:
                    continue
                o = other.iloc[0]
                per_seed = diff(values(tables.hilo_runs, o, ONPOLICY_KEYS, "quality"),
                                values(tables.hilo_runs, r, ONPOLICY_KEYS, "quality"))
                yield (_where(label, o, f"{r['variant']} (energy)"), per_seed, f"{o['variant']} - {r['variant']}",
                       equal_updates(tables, o, r, (allocation, "energy")))
    return find


# ---------------------------------------------------------------- SPRA
def _optimizer(t: pd.DataFrame) -> pd.Series:
    """Each configuration's client optimizer (federated.optimizer; a table without the column: sgd)."""
    if "optimizer" not in t:
        return pd.Series("sgd", index=t.index)
    return t["optimizer"].fillna("").astype(str).replace("", "sgd")


def _spra_configs(tables: Tables) -> Iterator[tuple[Where, pd.Series, pd.DataFrame]]:
    """Per (scenario, backend, model, client optimizer): SPRA's reference configuration and the
    configurations with the same optimizer (the SGD spra against the SGD baselines, spra_adamw against
    the *_adamw ones).

    The reference is the variant named ``spra`` (``spra_<optimizer>`` for another optimizer), else one
    with the linear rate rule. ``where`` names the model and the optimizer.
    """
    spra = tables.spra
    if spra.empty:
        return
    spra = spra[constant_links(spra)]
    spra = spra.assign(_optimizer=_optimizer(spra))
    for (scenario, backend, _, opt), t in spra.groupby(["scenario", "backend", _models(spra), "_optimizer"],
                                                       sort=True):
        cands = t[t["method"] == "spra"]
        if cands.empty:
            continue
        named = cands[cands["variant"] == ("spra" if opt == "sgd" else f"spra_{opt}")]
        linear = cands[cands["lr_rule"].astype(str).isin(["linear", ""])]
        r = (named if len(named) else linear if len(linear) else cands).iloc[0]
        yield _where(f"{scenario} [{backend}]", r, tail=f"ranks {r['ranks']}, optimizer {opt}"), r, t


def spra_uplink(tables: Tables) -> Found:
    for where, r, _ in _spra_configs(tables):
        yield where, values(tables.spra_runs, r, FEDERATED_KEYS, "uplink_frac_vs_fedit"), ""


def spra_compute(tables: Tables) -> Found:
    for where, r, _ in _spra_configs(tables):
        measure = str(r.get("compute_measure") or "client_compute_s")
        note = "" if measure != "client_compute_s" else "compute time under contention (no FLOPs or isolated time)"
        per_seed = values(tables.spra_runs, r, FEDERATED_KEYS, "compute_frac_vs_fedit")
        yield where.then(f", measure {measure}"), per_seed, note


def spra_adapter_compute(tables: Tables) -> Found:
    for where, r, _ in _spra_configs(tables):
        per_seed = values(tables.spra_runs, r, FEDERATED_KEYS, "adapter_frac_vs_fedit")
        if per_seed:                                        # runs recorded before the column: no row
            yield where.then(", measure client_adapter_flops"), per_seed, ""


def spra_beats_baselines(tables: Tables) -> Found:
    for where, r, t in _spra_configs(tables):
        mine = values(tables.spra_runs, r, FEDERATED_KEYS, "accuracy")
        for _, other in t[t["method"] != "spra"].iterrows():
            theirs = values(tables.spra_runs, other, FEDERATED_KEYS, "accuracy")
            yield where.then(f", vs {other['variant']}"), diff(mine, theirs), ""


def spra_lr_rule(tables: Tables) -> Found:
    for where, r, t in _spra_configs(tables):
        const = t[(t["method"] == "spra") & (t["lr_rule"] == "const")]
        if pd.notna(r["resample_every"]):   # the ablation changes the rate rule only
            const = const[const["resample_every"].isna() | (const["resample_every"] == r["resample_every"])]
        if "a_variance" in t:              # ... at the same variance of A (1/r_k vs 1/r_ref is its own claim)
            const = const[const["a_variance"].fillna("").astype(str) == str(r.get("a_variance") or "")]
        if len(const) and r["lr_rule"] in ("linear", ""):
            named = const[const["variant"] == "spra_const_lr"]   # not the aggregation or horizon ablations' const rows
            c = (named if len(named) else const).iloc[0]
            yield where.then(f", vs {c['variant']}"), diff(values(tables.spra_runs, r, FEDERATED_KEYS, "accuracy"),
                                                           values(tables.spra_runs, c, FEDERATED_KEYS, "accuracy")), ""


def spra_versus(mine: str, theirs: str) -> Callable[[Tables], Found]:
    """SPRA's own claims as paired variants of one scenario (docs/federated.md, "SPRA's claims"):
    per (scenario, backend, client optimizer), the per-seed accuracy of variant ``mine`` minus
    that of ``theirs``, where both ran (make bench's spra_claims step runs them)."""
    def find(tables: Tables) -> Found:
        for where, _, t in _spra_configs(tables):
            a, b = t[t["variant"] == mine], t[t["variant"] == theirs]
            if len(a) and len(b):
                yield where.then(f", {mine} vs {theirs}"), diff(
                    values(tables.spra_runs, a.iloc[0], FEDERATED_KEYS, "accuracy"),
                    values(tables.spra_runs, b.iloc[0], FEDERATED_KEYS, "accuracy")), ""
    return find


INTERVAL = "95% t-interval of the per-seed values"
SPECS = [
    ClaimSpec("full sync", "held-out quality improves on the base model (the run is long enough to learn)",
              "quality - base quality", 0.0, ">=",
              f"per-seed final accuracy minus the base model's (the adapter before update 0, same held-out prompts); "
              f"met when the whole {INTERVAL} is > 0", full_sync_learns),
    ClaimSpec("HiLo", "bytes per update <= 1.6% of full sync (configured budget / achieved; by construction)",
              "bytes_frac", HILO_BYTES, "<=",
              f"per-seed bytes/update over the same seed's bf16 full sync; met when the whole {INTERVAL} is <= 1.6%",
              hilo_bytes, "per update (mean over the run)"),
    ClaimSpec("HiLo", "update speedup >= 2.2x vs full sync", "speedup", HILO_SPEEDUP, ">=",
              f"per-seed full-sync update_s / HiLo update_s at this rate; met when the whole {INTERVAL} is > 2.2",
              hilo_speedup, "per update (mean over the run)"),
    ClaimSpec("HiLo", "quality within 2% of full sync", "quality_retained", HILO_RETAINED, ">=",
              f"per-seed final accuracy / same seed's full sync; met when the whole {INTERVAL} is > 0.98",
              hilo_quality),
    ClaimSpec("HiLo", "quality within 2% of low-rank training at equal bytes", "quality / lowrank quality",
              HILO_RETAINED, ">=",
              f"per-seed final accuracy / same seed's low-rank (smallest rank); met when the whole {INTERVAL} is > 0.98",
              hilo_equal_bytes),
    ClaimSpec("HiLo", "quality within 2% of full sync at equal wall-clock time", "quality_retained_equal_time",
              HILO_RETAINED, ">=",
              f"per-seed accuracy / same seed's full sync, both when the faster of the two finishes (linear between "
              f"evaluations); met when the whole {INTERVAL} is > 0.98", hilo_equal_time),
    ClaimSpec("HiLo", f"reaches {WALLCLOCK_TARGET:.0%} of full sync's final quality no later than full sync",
              "time_to_95_vs_full", 1.0, "<=",
              f"per-seed time to {WALLCLOCK_TARGET:.0%} of the same seed's full-sync final accuracy, over full sync's "
              f"own; met when the whole {INTERVAL} is < 1", hilo_time_to_95,
              f"equal wall-clock: time to {WALLCLOCK_TARGET:.0%} of full sync's final quality"),
    ClaimSpec("SPRA-LoRA", "uplink <= 50% of FedIT", "uplink_frac_vs_fedit", SPRA_UPLINK, "<=",
              f"per-seed uplink bytes/round over the same seed's FedIT; met when the whole {INTERVAL} is < 0.5",
              spra_uplink, "per round (mean over the run)"),
    ClaimSpec("SPRA-LoRA", "client compute <= 50% of FedIT (reading 1: the whole client step)",
              "compute_frac_vs_fedit", SPRA_COMPUTE, "<=",
              f"per-seed client compute over the same seed's FedIT; met when the whole {INTERVAL} is < 0.5",
              spra_compute, "per round (mean over the run)"),
    ClaimSpec("SPRA-LoRA", "client compute <= 50% of FedIT (reading 2: LoRA's own FLOPs over the frozen model's "
              "forward and backward)", "adapter_frac_vs_fedit", SPRA_COMPUTE, "<=",
              f"per-seed adapter FLOPs over the same seed's FedIT; met when the whole {INTERVAL} is < 0.5",
              spra_adapter_compute, "per round (mean over the run)"),
    ClaimSpec("SPRA-LoRA", "higher final accuracy than every baseline", "accuracy - baseline accuracy", 0.0, ">=",
              f"per-seed accuracy difference to this baseline (same seed); met when the whole {INTERVAL} is > 0",
              spra_beats_baselines, "final round"),
    ClaimSpec("SPRA-LoRA", "rank-aware (linear) lr beats constant lr", "accuracy - const-lr accuracy", 0.0, ">=",
              f"per-seed accuracy difference to the const-lr ablation; met when the whole {INTERVAL} is > 0",
              spra_lr_rule, "final round"),
    ClaimSpec("SPRA-LoRA", "at equal uplink the freed budget buys accuracy (SPRA at 2x each rank vs FedIT)",
              "accuracy - FedIT accuracy", 0.0, ">=",
              f"per-seed accuracy of spra_equal_uplink minus fedit (same uplink bytes); met when the whole {INTERVAL} is > 0",
              spra_versus("spra_equal_uplink", "fedit"), "final round"),
    ClaimSpec("SPRA-LoRA", "rank-aware lr beats constant lr with A's variance fixed at 1/r_ref (the SNR argument alone)",
              "accuracy - const-lr accuracy", 0.0, ">=",
              f"per-seed accuracy of spra_aref_linear minus spra_aref_const; met when the whole {INTERVAL} is > 0",
              spra_versus("spra_aref_linear", "spra_aref_const"), "final round"),
    ClaimSpec("SPRA-LoRA", "periodic resampling of A helps (T=5 vs never)", "accuracy - no-resample accuracy", 0.0,
              ">=", f"per-seed accuracy of spra minus spra_no_resample; met when the whole {INTERVAL} is > 0",
              spra_versus("spra", "spra_no_resample"), "final round"),
]
# Spar's allocation (beyond the paper, docs/compress.md "Allocation"): each variant against the default, energy
for _at, (_alloc, _what) in enumerate((("normalized", "energy normalised per matrix"),
                                      ("preconditioned", "the energy of the Adam step (the learner's replicated state)")),
                                     start=next(i for i, s in enumerate(SPECS) if s.method == "SPRA-LoRA")):
    SPECS.insert(_at, ClaimSpec(
        "HiLo (ablation)", f"allocation ablation: {_alloc} ({_what}) vs energy", "accuracy difference", 0.0, ">=",
        f"per-seed final accuracy of HiLo + Spar with allocation={_alloc} minus energy's (same seed, rate, budget); "
        f"'met' when the whole {INTERVAL} is > 0 (the variant is better)", hilo_allocation(_alloc)))
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
        spra_versus(_mine, _theirs), f"final round ({_rounds} rounds)"))


def judge(spec: ClaimSpec, where: Where, per_seed: dict, note: str, horizon: str | None = None) -> dict:
    """One claims.csv line: estimate, interval, verdict and seeds to resolve from per-seed values;
    ``where`` (from ``_where``) also gives the line its ``model``; ``horizon`` (default: the spec's)
    says which horizon the verdict uses."""
    if not isinstance(where, Where):
        raise TypeError(f"{spec.claim}: where {where!r} is not built by claims._where (it names the model)")
    s = summarize(per_seed.values())
    v = verdict(s.ci_low, s.ci_high, spec.threshold, spec.direction)
    need = seeds_needed(s.mean, s.sd, spec.threshold) if v == INCONCLUSIVE else math.nan
    if s.n < 2:
        note = "; ".join(x for x in (note, f"n={s.n}: no interval, run >= 3 seeds") if x)
    return {"method": spec.method, "claim": spec.claim, "where": where.text, "model": where.model,
            "horizon": spec.horizon if horizon is None else horizon, "estimate": s.mean, "ci_low": s.ci_low,
            "ci_high": s.ci_high, "sd": s.sd, "n_seeds": s.n, "seeds": ",".join(str(k) for k in per_seed),
            "rule": spec.rule, "verdict": v, "seeds_to_resolve": need, "threshold": spec.threshold,
            "direction": spec.direction, "statistic": spec.statistic, "note": note}


def claims_frame(tables: Tables, specs: list[ClaimSpec] | None = None) -> pd.DataFrame:
    """Every claim the results allow judging, HiLo first (claims.csv)."""
    lines = [judge(spec, *found) for spec in (specs or SPECS) for found in spec.find(tables)]
    return pd.DataFrame(lines, columns=COLUMNS)


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
