"""The SPRA-LoRA claims' finders (claims.py judges them): uplink and compute against FedIT, accuracy
against every baseline, the rank-aware learning rate, and SPRA's own paired variants."""
from __future__ import annotations

from typing import Callable, Iterator

import pandas as pd

from harness.report.claimkit import Found, Line, Where, _models, _where, diff, run_ids, values
from harness.report.metrics_federated import FEDERATED_KEYS
from harness.report.rowkit import constant_links
from harness.report.tables import Tables

SPRA_UPLINK, SPRA_COMPUTE = 0.5, 0.5


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


def _pairs(tables: Tables, mine: pd.Series, theirs: pd.Series) -> dict | None:
    """seed -> (run id of ``mine``, run id of ``theirs``) where both ran: per-prompt pairing."""
    a, b = run_ids(tables.spra_runs, mine, FEDERATED_KEYS), run_ids(tables.spra_runs, theirs, FEDERATED_KEYS)
    return {s: (a[s], b[s]) for s in a if s in b} or None


def _versus(tables: Tables, where: Where, mine: pd.Series, theirs: pd.Series) -> Line:
    """Accuracy of ``mine`` minus ``theirs`` per seed, paired prompt by prompt where records allow."""
    return Line(where, diff(values(tables.spra_runs, mine, FEDERATED_KEYS, "accuracy"),
                            values(tables.spra_runs, theirs, FEDERATED_KEYS, "accuracy")), "",
                pairs=_pairs(tables, mine, theirs), op="diff")


def spra_beats_baselines(tables: Tables) -> Found:
    for where, r, t in _spra_configs(tables):
        for _, other in t[t["method"] != "spra"].iterrows():
            yield _versus(tables, where.then(f", vs {other['variant']}"), r, other)


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
            yield _versus(tables, where.then(f", vs {c['variant']}"), r, c)


def spra_versus(mine: str, theirs: str) -> Callable[[Tables], Found]:
    """SPRA's own claims as paired variants of one scenario (docs/federated.md, "SPRA's claims"):
    per (scenario, backend, client optimizer), the per-seed accuracy of variant ``mine`` minus
    that of ``theirs``, where both ran (make bench's spra_claims step runs them)."""
    def find(tables: Tables) -> Found:
        for where, _, t in _spra_configs(tables):
            a, b = t[t["variant"] == mine], t[t["variant"] == theirs]
            if len(a) and len(b):
                yield _versus(tables, where.then(f", {mine} vs {theirs}"), a.iloc[0], b.iloc[0])
    return find
