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
# # SPRA-LoRA and the federated LoRA baselines
#
# Loads every federated run under `results/runs/`, rebuilds the SPRA table and redraws
# the figures with `harness.report`. Run it as a script or open it with jupytext:
#
#     python notebooks/federated_analysis.py --results results
#     NARROWBAND_RESULTS=results jupyter lab notebooks/federated_analysis.py
#
# Bytes are payload bytes per round summed over the round's clients; compute is per
# client and round; accuracy is the server's final held-out accuracy.

# %%
from harness.report import build_tables, collect
from harness.report import federated_plots as F
from harness.report import plots as P
from harness.report.claims import SPECS, claims_frame
from harness.report.metrics_federated import federated_curves
from harness.report.notebook import results_dir, show, show_figures

RESULTS = results_dir()
coll = collect(RESULTS)
tables = build_tables(coll)
print(f"{RESULTS}: {len(coll.ok_runs)} ok runs of {len(coll.runs)}; backends {coll.backends()}")

# %% [markdown]
# ## Method x rank mix: uplink, downlink, client compute, round time, accuracy

# %%
cols = ["scenario", "backend", "method", "variant", "ranks", "uplink_bytes", "uplink_frac_vs_fedit",
        "downlink_bytes", "client_compute_s", "compute_frac_vs_fedit", "round_s", "accuracy", "seeds"]
show(tables.spra[cols] if len(tables.spra) else tables.spra, "spra.csv")

# %% [markdown]
# ## The claims: uplink and compute halved, better accuracy with heterogeneous ranks

# %%
show(claims_frame(tables, [c for c in SPECS if c.method == "SPRA-LoRA"]),
     "claims: estimate, 95% t-interval over seeds, verdict (empty: no SPRA run with a FedIT baseline)")

# %% [markdown]
# ## Where client time goes: forward vs backward per round

# %%
if len(tables.spra):
    show(tables.spra[["scenario", "backend", "variant", "forward_s", "backward_s", "client_compute_s"]])

# %% [markdown]
# ## Figures (written to results/plots/, PNG and PDF)

# %%
log = P.PlotLog()
curves = federated_curves(coll.rows)
out = RESULTS / "plots"
F.plot_federated_rounds(curves, out, log)
F.plot_federated_uplink(curves, out, log)
P.plot_snr(tables.snr, out, log)
show_figures(log)
