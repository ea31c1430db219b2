"""The HiLo claims' finders (claims.py judges them): bytes, speedup, quality against full sync and
low-rank training, the equal-wall-clock horizon, full sync's own gain, Spar's allocation ablation."""
from __future__ import annotations

import math
from typing import Callable, Iterator

import numpy as np
import pandas as pd

from harness.report.claimkit import Found, Line, _models, _where, diff, ratio, run_ids, values
from harness.report.metrics import (CONTINUOUS_METRIC, ONPOLICY_KEYS, PLATEAU_EVALS, WALLCLOCK_TARGET, plateau,
                                    synchronous)
from harness.report.rowkit import constant_links
from harness.report.tables import Tables

HILO_BYTES, HILO_SPEEDUP, HILO_RETAINED = 0.016, 2.2, 0.98
OBJECTIVE = CONTINUOUS_METRIC["distill"]   # the distillation objective's per-prompt score (lower is better)
DEFAULT_ALLOCATION = "energy"          # compressor.options.allocation of the paper's Spar


def _at_budget(configs: pd.DataFrame, budget: float) -> pd.DataFrame:
    """The configurations at the budget closest to ``budget`` (all of them when none has one)."""
    budgets = configs["budget_frac"].dropna()
    if not len(budgets):
        return configs
    return configs[configs["budget_frac"] == budgets.iloc[int(np.argmin(np.abs(budgets - budget)))]]


def _hilo_with(t: pd.DataFrame, compressor: str) -> pd.DataFrame:
    """HiLo with ``compressor`` at the training rank (Spar: the paper's energy allocation; the others its ablation)."""
    rows = (t["method"] == "hilo") & (t["compressor"] == compressor) & (t["rank"] == t["ref_rank"])
    if compressor == "spar":
        rows &= _allocation(t) == DEFAULT_ALLOCATION
    return t[rows]


def _spar_configs(tables: Tables) -> Iterator[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """(scenario [backend] label, HiLo+Spar configurations at the training rank and the budget closest to
    1.6% (the claim's), that scenario's table)."""
    for label, t in _onpolicy_groups(tables):
        spar = _hilo_with(t, "spar")
        if spar.empty:
            continue
        yield label, _at_budget(spar, HILO_BYTES).sort_values(["ref_rank", "rate_mbit"]), t


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


def _fair(r: pd.Series) -> str:
    dtype = str(r.get("baseline_dtype") or "")
    return "" if dtype in ("", "nan", "bf16") else f"vs {dtype} full sync: not the claim's bf16 baseline"


def hilo_bytes(tables: Tables) -> Found:
    """The cap: per seed the largest single update's bytes over full sync's (``bytes_frac_max``), at
    each rank and rate the configuration ran (the rate does not set the bytes; every run counts)."""
    for label, spar, _ in _spar_configs(tables):
        for _, r in spar.groupby("ref_rank").head(1).iterrows():
            fair = _fair(r)
            runs = spar[spar["ref_rank"] == r["ref_rank"]]
            per_seed: dict = {}
            for _, c in runs.iterrows():     # the largest over every rate's runs of each seed
                for seed, v in values(tables.hilo_runs, c, ONPOLICY_KEYS, "bytes_frac_max").items():
                    per_seed[seed] = max(v, per_seed.get(seed, -math.inf))
            budget = r["budget_frac"]
            note = (f"configured budget {budget:.2%}; mean over updates {r['bytes_frac']:.3%}" if budget == budget
                    else f"mean over updates {r['bytes_frac']:.3%} (no budget configured)")
            yield Line(_where(label, r, rates=list(runs["rate_mbit"].unique())), {} if fair else per_seed, fair or note)


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
    # A slope interval that reaches 0 shows no rise; it does not show a plateau (3 noisy seeds reach 0 easily:
    # hilo_real's full sync, still rising on 256 validation prompts from 32 to 48 updates, docs/onpolicy.md).
    word = ("no significant rise (not a shown plateau)" if flat
            else "NOT plateaued (still rising: a per-update lag at this horizon)")
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


def _pairs(tables: Tables, mine: pd.Series, theirs: pd.Series | None) -> dict | None:
    """seed -> (run id of ``mine``, run id of ``theirs``) where both ran: per-prompt pairing."""
    if theirs is None:
        return None
    a, b = run_ids(tables.hilo_runs, mine, ONPOLICY_KEYS), run_ids(tables.hilo_runs, theirs, ONPOLICY_KEYS)
    return {s: (a[s], b[s]) for s in a if s in b} or None


def hilo_quality(tables: Tables) -> Found:
    for label, spar, t in _spar_configs(tables):
        for _, r in _horizons(spar).iterrows():
            full = _baseline(t, r)
            yield Line(_where(label, r), values(tables.hilo_runs, r, ONPOLICY_KEYS, "quality_retained"), "",
                       equal_updates(tables, r, full), pairs=_pairs(tables, r, full))


def hilo_objective(tables: Tables) -> Found:
    """On distillation, the objective itself: full sync's final mean reverse KL to the teacher over HiLo's, per
    seed (lower is better: >= 1 where HiLo is at least as close); per-prompt pairs on ``reverse_kl``."""
    for label, spar, t in _spar_configs(tables):
        for _, r in _horizons(spar).iterrows():
            full = _baseline(t, r)
            if full is None or str(r.get("continuous_metric")) != OBJECTIVE:
                continue
            mine = values(tables.hilo_runs, r, ONPOLICY_KEYS, "continuous")
            theirs = values(tables.hilo_runs, full, ONPOLICY_KEYS, "continuous")
            pairs = _pairs(tables, full, r)           # full sync's over HiLo's: the ratio's order
            yield Line(_where(label, r), ratio(theirs, mine), f"{OBJECTIVE}, lower is better",
                       equal_updates(tables, r, full), pairs=pairs, column=OBJECTIVE)


def _other_compressors(spar: pd.DataFrame, t: pd.DataFrame) -> Iterator[tuple[str, pd.Series]]:
    """(compressor, configuration) of HiLo with every compressor but Spar that ran at Spar's budget
    (``spar``: its configurations at the claim's budget), one per training rank and horizon."""
    budget = spar["budget_frac"].dropna()
    for comp in sorted(set(t.loc[t["method"] == "hilo", "compressor"].astype(str)) - {"spar"}):
        others = _hilo_with(t, comp)
        if len(budget):
            others = others[np.isclose(others["budget_frac"].astype(float), float(budget.iloc[0]))]
        for _, r in _horizons(others).iterrows():
            yield comp, r


def hilo_other_compressors(tables: Tables) -> Found:
    """HiLo with every other compressor that ran at Spar's claimed budget (1.6%), against full sync."""
    for label, spar, t in _spar_configs(tables):
        for comp, r in _other_compressors(spar, t):
            full = _baseline(t, r)
            yield Line(_where(label, r).then(f", compressor {comp}"),
                       values(tables.hilo_runs, r, ONPOLICY_KEYS, "quality_retained"),
                       f"HiLo + {comp} at {r['budget_frac']:.2%}", equal_updates(tables, r, full, (comp, "full sync")),
                       pairs=_pairs(tables, r, full))


def hilo_spar_vs_compressors(tables: Tables) -> Found:
    """HiLo + Spar against HiLo with each other compressor that ran at Spar's claimed budget (1.6%), at the
    same rate, training rank and horizon: the per-seed final accuracy of Spar minus the other's, paired
    prompt by prompt where the records allow."""
    for label, spar, t in _spar_configs(tables):
        mine = _scored(spar)
        for comp, o in _other_compressors(spar, t):
            same = mine[(mine["rate_mbit"] == o["rate_mbit"]) & (mine["ref_rank"] == o["ref_rank"])
                        & _same_horizon(mine, o)]
            if same.empty:
                continue
            r = same.iloc[0]
            per_seed = diff(values(tables.hilo_runs, r, ONPOLICY_KEYS, "quality"),
                            values(tables.hilo_runs, o, ONPOLICY_KEYS, "quality"))
            yield Line(_where(label, r, f"HiLo + {comp} ({o['variant']})"), per_seed,
                       f"HiLo + Spar at {r['budget_frac']:.2%} minus HiLo + {comp} at {o['budget_frac']:.2%}",
                       equal_updates(tables, r, o, ("Spar", comp)), pairs=_pairs(tables, r, o), op="diff")


def hilo_equal_time(tables: Tables) -> Found:
    """Quality at equal wall-clock time: HiLo's over full sync's, each read at its last evaluation at or
    before the time the faster finishes, per rate."""
    for label, spar, _ in _spar_configs(tables):
        for _, r in _scored(spar).iterrows():
            per_seed = values(tables.hilo_runs, r, ONPOLICY_KEYS, "quality_retained_equal_time")
            at = values(tables.hilo_runs, r, ONPOLICY_KEYS, "equal_time_s")
            mine = values(tables.hilo_runs, r, ONPOLICY_KEYS, "equal_time_read_s")
            full = values(tables.hilo_runs, r, ONPOLICY_KEYS, "equal_time_full_read_s")
            horizon = "equal wall-clock: when the faster finishes"
            if at:
                horizon += (f" (mean {np.mean(list(at.values())):.1f} s; read at HiLo's evaluation at "
                            f"{np.mean(list(mine.values())) if mine else math.nan:.1f} s and full sync's at "
                            f"{np.mean(list(full.values())) if full else math.nan:.1f} s, means over seeds)")
            fair = _fair(r)
            yield Line(_where(label, r), {} if fair else per_seed, fair or _unread(at, mine, full), horizon)


def _unread(at: dict, mine: dict, full: dict) -> str:
    """Why seeds have no equal-time reading: a side with no evaluation at or before the equal time ("" if none)."""
    missing = [s for s in at if s not in mine or s not in full]
    if not missing:
        return ""
    sides = " and ".join(name for name, read in (("HiLo", mine), ("full sync", full)) if any(s not in read for s in missing))
    return (f"not measured on {len(missing)} of {len(at)} seeds: {sides} had no evaluation at or before the equal time "
            f"(mean {np.mean(list(at.values())):.1f} s) and a value between evaluations is never drawn; evaluate "
            "more often (onpolicy.eval_every) or the base model (onpolicy.eval_base=true) to read it")


def hilo_time_to_95(tables: Tables) -> Found:
    """Time to 95% of full sync's final quality, HiLo's over full sync's own, per rate; a seed that never
    gets there carries its lower bound and is censored."""
    for label, spar, _ in _spar_configs(tables):
        for _, r in _scored(spar).iterrows():
            fair = _fair(r)
            mine = values(tables.hilo_runs, r, ONPOLICY_KEYS, "time_to_95_vs_full")
            flags = values(tables.hilo_runs, r, ONPOLICY_KEYS, "time_to_95_censored")
            censored = frozenset(s for s, f in flags.items() if f and s in mine)
            note = (f"{len(censored)} of {len(mine)} seeds never reached {WALLCLOCK_TARGET:.0%} of full sync's final "
                    "quality: their ratio is a lower bound (censored at the run's end)" if censored else "")
            yield Line(_where(label, r), {} if fair else mine, fair or note, censored=censored)


def hilo_equal_bytes(tables: Tables) -> Found:
    """HiLo + Spar at the budget nearest the low-rank run's bytes, against that low-rank run (same seed, rate,
    horizon): quality at truly equal bytes."""
    for label, _, t in _spar_configs(tables):
        all_spar = _scored(_hilo_with(t, "spar"))
        for _, lo_r in _horizons(t[t["method"] == "lowrank"].sort_values(["ref_rank", "rate_mbit", "rank"])).iterrows():
            cands = all_spar[(all_spar["rate_mbit"] == lo_r["rate_mbit"]) & (all_spar["ref_rank"] == lo_r["ref_rank"])
                             & _same_horizon(all_spar, lo_r)]
            if cands.empty:
                continue
            r = _at_budget(cands, float(lo_r["bytes_frac"])).iloc[0]
            mine = values(tables.hilo_runs, r, ONPOLICY_KEYS, "quality")
            theirs = values(tables.hilo_runs, lo_r, ONPOLICY_KEYS, "quality")
            note = (f"low-rank r={int(lo_r['rank'])} ships {lo_r['bytes_frac']:.2%} of full sync, "
                    f"HiLo+Spar {r['bytes_frac']:.2%}")
            if not math.isclose(float(r["bytes_frac"]), float(lo_r["bytes_frac"]), rel_tol=0.25):
                note += " (not equal bytes: no HiLo run at the low-rank run's bytes)"
            yield Line(_where(label, r, f"low-rank r={int(lo_r['rank'])}"), ratio(mine, theirs), note,
                       equal_updates(tables, r, lo_r, ("HiLo", "low-rank")), pairs=_pairs(tables, r, lo_r))


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
