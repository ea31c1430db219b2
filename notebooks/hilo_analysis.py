# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # HiLo ("train high, ship low"): on-policy sync methods
#
# Loads every on-policy run under `results/runs/`, rebuilds the HiLo and sweep tables and
# redraws the figures with `harness.report`. Run it as a script or open it with jupytext:
#
#     python notebooks/hilo_analysis.py --results results
#     NARROWBAND_RESULTS=results jupyter lab notebooks/hilo_analysis.py
#
# Metric definitions: `harness/report/metrics.py` (and docs/report.md). Backends are
# never mixed: every table below carries its `backend` column.

# %%
import pandas as pd

from harness.report import build_tables, collect
from harness.report import plots as P
from harness.report.claims import SPECS, claims_frame, crossover_frame
from harness.report.metrics import onpolicy_curves
from harness.report.notebook import results_dir, show, show_figures

RESULTS = results_dir()
coll = collect(RESULTS)
tables = build_tables(coll)
print(f"{RESULTS}: {len(coll.ok_runs)} ok runs of {len(coll.runs)}; backends {coll.backends()}")

# %% [markdown]
# ## Runs left out (failed, interrupted, incomplete)

# %%
show(pd.DataFrame([(r.scenario, r.run_id, r.status, r.reason) for r in coll.excluded],
                  columns=["scenario", "run_id", "status", "reason"]), "left out")

# %% [markdown]
# ## Headline table: bytes, speedup and quality vs full sync

# %%
headline = ["scenario", "backend", "task", "method", "compressor", "rank", "rate_mbit", "bytes_per_update",
            "bytes_frac", "update_s", "speedup", "quality", "quality_retained", "in_sync_frac", "time_to_target_s"]
show(tables.hilo[headline] if len(tables.hilo) else tables.hilo, "hilo.csv")

# %% [markdown]
# ## The claims: <= 1.6% of the bytes, >= 2.2x update speedup, quality within 2%

# %%
show(claims_frame(tables, [c for c in SPECS if c.method == "HiLo"]),
     "claims: estimate, 95% t-interval over seeds, verdict (empty: no HiLo + Spar run with a full-sync baseline)")
show(crossover_frame(tables), "crossover: link rate where speedup = 1, per seed then aggregated")

# %% [markdown]
# ## Rate x rank sweep (speedup and bytes fraction per grid point)

# %%
if len(tables.sweep):
    sweep = tables.sweep[tables.sweep["method"] != "full_sync"]
    show(sweep.pivot_table(index=["scenario", "backend", "method", "compressor", "rate_mbit"],
                           columns="rank", values="speedup").reset_index(), "speedup vs full sync")

# %% [markdown]
# ## Figures (written to results/plots/, PNG and PDF)

# %%
log = P.PlotLog()
curves = onpolicy_curves(coll.rows)
out = RESULTS / "plots"
P.plot_frontier(tables.hilo, out, log)
P.plot_quality_vs_bytes(curves, out, log)
P.plot_quality_vs_time(curves, out, log)
P.plot_speedup_vs_rate(tables.hilo, out, log)
P.plot_bytes_vs_rank(tables.hilo, out, log)
P.plot_spar_ranks(coll.rows, out, log)
show_figures(log)

# %% [markdown]
# ## Spar's allocation: mean rank given to each module type over the run

# %%
allocations = P.spar_allocations(coll.rows).dropna() if len(coll.rows) else []
if len(allocations):
    run_id = coll.rows.loc[allocations.index[0], "run_id"]
    ranks = P.spar_rank_matrix(coll.rows[coll.rows["run_id"] == run_id])
    by_module = ranks.mean(axis=1).groupby(lambda n: P.short_matrix_name(n).split(" ", 1)[-1]).mean()
    show(by_module.rename_axis("matrix").rename("mean k").reset_index(), f"Spar ranks, run {run_id}")
