"""``results/summary.md``: the paper-style tables, the figures, and the runs left out.

Every table section names its scenario, its backend and the exact command(s) that
produced its runs. Units: MB = 10^6 bytes, kB = 10^3 bytes, seconds, Mbit/s. Cells over
seeds read ``3.03× ± 0.12 (n=5)``: mean ± half-width of the 95% t-interval, n = seeds.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from harness.report.sparsity_plot import sparsity_section
from harness.report.claims import claims_frame, crossover_frame
from harness.report.collect import Collection, model_label
from harness.report.headline import headline, setting
from harness.report.metrics import TARGET_FRACTION
from harness.report.plots import PlotLog, short_module_name
from harness.report.stats import Summary, cell
from harness.report.style import label
from harness.report.textfmt import (DASH, claim_note, claim_text, claim_value, fmt_bytes, fmt_num, fmt_pct, fmt_q,
                                    fmt_rate, fmt_s, fmt_x, in_run_paths, is_nan, markdown_table, power_text,
                                    short_reason, stat, supported_decimals)
from harness.report.tables import Tables, snr_slopes


def _section_head(coll: Collection, scenario: str, backend: str) -> list[str]:
    cmds = coll.commands(scenario, backend)
    shown = "\n".join(f"    {c}" for c in cmds[:4]) + (f"\n    … and {len(cmds) - 4} more" if len(cmds) > 4 else "")
    return [f"### Scenario `{scenario}` · backend `{backend}`", "", "Command:", "", shown, ""]


def _groups(frame: pd.DataFrame, by: Iterable[str] = ("scenario", "backend")):
    return frame.groupby(list(by), sort=True) if len(frame) else []


def _method_name(r: pd.Series) -> str:
    k = r.get("staleness")
    return label(r["method"], r.get("compressor")) + (f" (staleness {int(k)})" if not is_nan(k) and k else "")


def _trace_note(t: pd.DataFrame) -> str:
    """A sentence for tables with rows on link traces (``trace`` set), else empty."""
    if "trace" not in t or not t["trace"].notna().any():
        return ""
    names = ", ".join(sorted({str(v) for v in t["trace"].dropna()}))
    return (f" Rows on a link trace ({names}; docs/netem.md): the rate is the trace's time-mean rate, and "
            "ratios are against the baseline on the same trace.")


def _k(v) -> str:
    """The overlap mode of a row: 0 (synchronous, also for runs that predate the column) or k."""
    return "0" if is_nan(v) else f"{int(v)}"


def is_grid(t: pd.DataFrame) -> bool:
    """A rate x rank sweep: more than one link rate and more than one training rank."""
    return t["rate_mbit"].nunique() > 1 and t["ref_rank"].nunique() > 1


def claims_section(tables: Tables, frame: pd.DataFrame | None = None) -> list[str]:
    out = ["## Claims, as measured here", ""]
    frame = claims_frame(tables) if frame is None else frame
    unjudged = frame.attrs.get("unjudged_lines", [])
    if frame.empty:
        return out + ["No run in these results measures a headline claim (HiLo + Spar with a full-sync "
                      "baseline, or SPRA with FedIT).", ""] + _unjudged_list(unjudged)
    counts = frame["verdict"].value_counts()
    held = frame["verdict_holm"].value_counts() if "verdict_holm" in frame else counts
    out += ["Each estimate is the mean of per-seed values (ratios and differences formed on the two runs of the "
            "same seed), with its 95% Student t-interval over seeds in brackets and n the seeds it rests on. A claim "
            "is **met** only when the whole interval is on the claim's side of the threshold, **not met** only when "
            "the whole interval is on the other side, **inconclusive** otherwise. Each claim names its test: "
            "non-inferiority (\"within 2%\": the lower end above 98%), superiority (a difference above 0), a bound "
            "on a mean, or a cap (a limit on every update, judged on the largest one). *Holm* is the verdict after "
            "Holm's adjustment for the number of claims in this table; *supported* is what the interval supports "
            "whatever the threshold; *seeds for 80%* the seeds that would resolve an inconclusive claim with 80% "
            "power at the observed spread, and in which direction. A seed that never reached a target counts as a "
            "lower bound (censored), never dropped. Full rules, p-values, the equivalence (TOST) reading and the "
            "two-level bootstrap over seeds and prompts: `tables/claims.csv`.", "",
            f"Verdicts: {', '.join(f'{k} {v}' for k, v in counts.items())}; after Holm: "
            f"{', '.join(f'{k} {v}' for k, v in held.items())}."
            + (f" {len(unjudged)} lines with fewer than 2 seeds are not judged (below)." if unjudged else ""), ""]
    frame = frame.assign(text=frame.apply(claim_text, axis=1), power=frame.apply(power_text, axis=1),
                         backed=[claim_value(st, v, supported_decimals(st, e, lo, hi)) if not is_nan(v) else DASH
                                 for st, v, e, lo, hi in zip(frame["statistic"], frame["supported"], frame["estimate"],
                                                             frame["ci_low"], frame["ci_high"])],
                         holm=frame["verdict_holm"].fillna("").astype(str) if "verdict_holm" in frame else "",
                         note=frame["note"].fillna("").astype(str).map(claim_note),
                         setting=frame.apply(lambda c: setting(c, scenario=False), axis=1),
                         group=[_group(w, m) for w, m in zip(frame["where"],
                                                             frame.get("model", pd.Series("", index=frame.index)))])
    out += ["One table per scenario, backend and model; *setting*: the link, rank and baseline of the line; each "
            "line's horizon (equal updates or equal wall-clock) is in `tables/claims.csv`.", ""]
    for group, g in frame.groupby("group", sort=False):
        out += [f"**{group}**", "",
                markdown_table(g, [("method", "method", str), ("claim", "claim", str), ("setting", "setting", str),
                                   ("test", "test", str), ("estimate [95% CI] (n)", "text", str),
                                   ("verdict", "verdict", str), ("Holm", "holm", str), ("supported", "backed", str),
                                   ("seeds for 80%", "power", str), ("note", "note", str)]), ""]
    return out + _unjudged_list(unjudged)


def _unjudged_list(unjudged: list[dict]) -> list[str]:
    """The claim lines left out of the tables (fewer than 2 seeds with a measured value), each with why."""
    if not unjudged:
        return []
    return (["**Not judged** (no line in the tables above: fewer than 2 seeds with a measured value):", ""]
            + [f"- {x['method']}: {x['claim']} — {x['where']} (n={x['n_seeds']}): {x['why']}" for x in unjudged]
            + [""])


def cost_section(tables: Tables) -> list[str]:
    """What a seed costs: per configuration, the mean wall time of one run and its share in updates (an
    on-policy run's) or rounds (a federated run's) and in evaluation (the rest is start-up: processes,
    models, links)."""
    need = {"run_wall_s", "eval_s_total"}
    parts = [(runs, work) for runs, work in ((tables.hilo_runs, "updates_s_total"), (tables.spra_runs, "rounds_s_total"))
             if not runs.empty and need | {work} <= set(runs.columns) and runs["run_wall_s"].notna().any()]
    if not parts:
        return []
    out = ["## What a seed costs", "",
           "Per configuration, the mean over its runs of one run's wall time (launch to end, run.json), the share "
           "spent in updates (on-policy: the learner's rows) or rounds (federated: the server's, each a downlink, "
           "the clients' local steps and an uplink) and in held-out evaluation, the rest being start-up (processes, "
           "model loading, links). Evaluation is kept under a fifth of a run where it can be.", ""]
    rows = []
    for runs, work in parts:
        rows += _cost_rows(runs, work)
    if not rows:
        return []
    frame = pd.DataFrame(rows)
    return out + [markdown_table(frame, [("scenario", "scenario", str), ("backend", "backend", str),
                                         ("variant", "variant", str), ("runs", "n", str), ("wall per run", "wall", str),
                                         ("updates or rounds", "updates", str), ("evaluation", "evaluation", str)]), ""]


def _cost_rows(runs: pd.DataFrame, work: str) -> list[dict]:
    """cost_section's rows of one runs table (``work``: its column of training seconds per run)."""
    rows = []
    for (scenario, backend, variant), g in runs.groupby(["scenario", "backend", "variant"], sort=True):
        wall = pd.to_numeric(g["run_wall_s"], errors="coerce")
        if not wall.notna().any():
            continue
        upd, ev = pd.to_numeric(g[work], errors="coerce"), pd.to_numeric(g["eval_s_total"], errors="coerce")
        rows.append({"scenario": scenario, "backend": backend, "variant": variant, "n": int(wall.notna().sum()),
                     "wall": f"{wall.mean() / 60:.1f} min", "updates": f"{(upd / wall).mean():.0%}",
                     "evaluation": f"{(ev / wall).mean():.0%}"})
    return rows


def _group(where: object, model: object) -> str:
    """A claims table's heading from a line's ``where``: '`hilo_real` · backend `tc` · SmolLM2-135M-Instruct (real)'."""
    text = str(where)
    scenario, _, rest = text.partition(" [")
    backend = rest.split("]", 1)[0] if rest else ""
    return f"`{scenario}`" + (f" · backend `{backend}`" if backend else "") + (f" · {model}" if model else "")


def crossover_section(cross: pd.DataFrame) -> list[str]:
    """Where HiLo stops paying off: the rate at which speedup = 1, per seed then summarised."""
    out = ["## Crossover: the link rate below which a method beats full sync", ""]
    if cross.empty:
        return out + ["No method was measured at two or more link rates with a full-sync baseline.", ""]
    out += ["Per seed, the speedup over full sync is interpolated linearly in log rate between the measured rates "
            "and the rate where it equals 1 is taken; the cell is the mean over seeds ± the 95% t half-width. "
            "Below that rate the method is faster than full sync. *above*/*below*: the speedup stays on one side "
            "of 1 over every measured rate (no crossing in range).", ""]
    shown = cross.assign(name=[label(m, c, r, rr) for m, c, r, rr in
                               zip(cross["method"], cross["compressor"], cross["rank"], cross["ref_rank"])],
                         budget=[fmt_pct(b, 1) for b in cross["budget_frac"]],
                         text=[cell(Summary(m, sd, int(n), lo, hi), "{:.3g}", " Mbit/s") if n else DASH
                               for m, sd, n, lo, hi in zip(cross["crossover_mbit"], cross["sd"], cross["n_seeds"],
                                                           cross["ci_low"], cross["ci_high"])])
    out += [markdown_table(shown, [("scenario", "scenario", str), ("backend", "backend", str),
                                   ("method", "name", str), ("budget", "budget", str),
                                   ("training rank", "ref_rank", lambda v: fmt_num(v, 4)),
                                   ("staleness", "staleness", _k), ("crossover", "text", str), ("speedup vs 1", "sides", str),
                                   ("rates (Mbit/s)", "rates", str)]), ""]
    return out


def load_section(coll: Collection, tables: Tables) -> list[str]:
    """Which timings were measured under load, and which runs started from a rebuilt base."""
    out = ["## Timing conditions and bases", ""]
    runs = pd.concat([t for t in (tables.hilo_runs, tables.spra_runs) if len(t)], ignore_index=True) \
        if len(tables.hilo_runs) or len(tables.spra_runs) else pd.DataFrame()
    if runs.empty:
        return out + ["No runs.", ""]
    known = runs["loaded"].notna() if "loaded" in runs else pd.Series(False, index=runs.index)
    loaded = runs[known & runs["loaded"].fillna(False).astype(bool)] if "loaded" in runs else runs.iloc[:0]
    out += [f"Speedups and times were measured on {len(runs)} runs: {int(known.sum())} recorded their load "
            f"(run.json `load`), {len(loaded)} of them under load (other programs took more than a quarter of "
            "CPUs × wall time while the run ran, from /proc/stat less the run's own CPU time; or the roles' CPU "
            "time above CPUs × wall time; records without the machine's CPU time: 1-minute load average above "
            "half the CPUs at the start or end); "
            f"{len(runs) - int(known.sum())} recorded none (timing conditions unknown). Tables count loaded runs "
            "in `loaded_runs`.", ""]
    if len(loaded):
        out += [f"- `{r['scenario']}/{r['run_id']}` (seed {r['seed']}): {r.get('load_notes', '')}"
                for _, r in loaded.iterrows()] + [""]
    rebuilt = runs[runs["rebuilt_base"].fillna(False).astype(bool)] if "rebuilt_base" in runs else runs.iloc[:0]
    if len(rebuilt):
        out += ["Runs that started from a **rebuilt base** (SHA-256 differs from the shipped reference; their "
                "quality is not comparable with the reference's):", ""]
        out += [f"- `{r['scenario']}/{r['run_id']}`: {r.get('base_sha256', '')}" for _, r in rebuilt.iterrows()] + [""]
    local = runs[runs["base_sha256"].fillna("").astype(str).str.contains("(local)", regex=False)] \
        if "base_sha256" in runs else runs.iloc[:0]
    shipped = runs.drop(index=rebuilt.index.union(local.index))
    if len(shipped):
        shas = sorted({str(v) for v in shipped.get("base_sha256", pd.Series(dtype=str)).dropna() if str(v)})
        out += [f"Bases: {'; '.join(f'`{v}`' for v in shas) if shas else 'no run recorded base hashes'}"
                f"{' (the shipped reference)' if shas else ''}.", ""]
    for scenario, t in local.groupby("scenario", sort=True):
        shas = sorted({str(v) for v in t["base_sha256"]})
        out += [f"`{scenario}` ({len(t)} runs) started from bases built on this machine (no shipped reference for "
                f"their recipe; another machine may build other bits): {'; '.join(f'`{v}`' for v in shas)}.", ""]
    return out


def hilo_section(coll: Collection, tables: Tables) -> list[str]:
    out = ["## HiLo and on-policy sync baselines", ""]
    if tables.hilo.empty:
        return out + ["No on-policy runs in these results.", ""]
    for (scenario, backend), t in _groups(tables.hilo):
        if is_grid(t):
            out += [f"Scenario `{scenario}` (backend `{backend}`) is a rate × rank sweep: see the sweep "
                    "section below and every grid point in `tables/hilo.csv`.", ""]
            continue
        t = t.assign(name=t.apply(_method_name, axis=1))
        metric = ", ".join(sorted(set(t["quality_metric"].dropna().astype(str)) - {"none", ""})) or "quality"
        out += _section_head(coll, scenario, backend)
        refs = sorted({f"`{v}`" + (f" ({d})" if d else "") for v, d in
                       zip(t["baseline_variant"], t["baseline_dtype"].fillna("")) if v})
        cont = ", ".join(sorted(set(t["continuous_metric"].dropna().astype(str)) - {"none", ""})) or "none recorded"
        counts = sorted({int(u) for u in t["updates"].dropna()})
        after = (f"{counts[0]} updates" if len(counts) == 1 else
                 " or ".join(str(c) for c in counts) + " updates (the variant's own count; compare quality only "
                 "between rows of the same count)")
        out += [f"Quality = final held-out {metric} after {after}, and the task's "
                f"continuous metric ({cont}); bytes = downlink payload per update per worker (incl. resyncs); "
                "speedup, bytes and retained quality are per seed vs the same seed's full sync at the same link and "
                f"training rank (reference run: {', '.join(refs) or 'none found'}), then averaged. Cells: mean ± "
                "95% t half-width (n = seeds); ⚠ = runs measured under load. Efficiency = ideal update (rollout, "
                "learn and both transfers at bytes×8/rate + latency) / measured update (docs/report.md); "
                "*staleness 1*: the labelled overlap mode (rollouts of update t+1 made with policy t while update "
                "t is on the wire), its speedup against the synchronous full sync." + _trace_note(t), ""]
        t = t.assign(flag=[f"{int(k)} ⚠" if k else "" for k in t["loaded_runs"].fillna(0)])
        out.append(markdown_table(t, [
            ("task", "task", str), ("method", "name", str), ("variant", "variant", str),
            ("rank", "rank", lambda v: fmt_num(v, 4)),
            ("rate (Mbit/s)", "rate_mbit", fmt_rate), ("bytes/update", "bytes_per_update", fmt_bytes),
            ("% of full sync", "*", stat("bytes_frac", "{:.2f}", "%", 100)), ("update (s)", "*", stat("update_s")),
            ("speedup", "*", stat("speedup", "{:.2f}", "×")),
            ("efficiency", "*", stat("efficiency", "{:.0f}", "%", 100)), (metric, "*", stat("quality")),
            (cont, "*", stat("continuous", "{:.3g}")), ("retained", "*", stat("quality_retained", "{:.1f}", "%", 100)),
            (f"time to {TARGET_FRACTION:.0%} (s)", "*", stat("time_to_target_s", "{:.2f}")),
            ("in sync", "in_sync_frac", fmt_pct), ("seeds", "seed_list", str), ("loaded", "flag", str),
        ]))
        out.append("")
    return out


def sweep_section(coll: Collection, tables: Tables) -> list[str]:
    out = ["## Sweep: link rate × training rank", ""]
    grids = [(k, t) for k, t in _groups(tables.sweep) if is_grid(t)]
    if not grids:
        return out + ["No scenario in these results varies both the rate and the training rank "
                      "(run a `scenarios/grid_*.yaml` sweep); `tables/sweep.csv` lists every grid point.", ""]
    for (scenario, backend), t in grids:
        out += _section_head(coll, scenario, backend)
        out += ["Each cell: update speedup vs full sync (mean ± 95% t half-width, n seeds) · bytes per update as % "
                "of full sync · quality retained (means), all per seed vs full sync at the same rate and training "
                "rank.", ""]
        for (method, compressor), g in t[t["method"] != "full_sync"].groupby(["method", "compressor"], sort=True):
            speed = stat("speedup", "{:.2f}", "×")
            cells = g.assign(text=[f"{speed(r)} · {fmt_pct(r['bytes_frac'], 2)} · {fmt_pct(r['quality_retained'])}"
                                   for _, r in g.iterrows()])
            grid = cells.pivot_table(index="rate_mbit", columns="rank", values="text", aggfunc="first")
            out += [f"**{label(method, compressor)}**", ""]
            cols = [("rate (Mbit/s)", "rate_mbit", fmt_rate)] + [(f"r={int(r)}", r, str) for r in grid.columns]
            out += [markdown_table(grid.fillna(DASH).reset_index(), cols), ""]
    return out


def spra_section(coll: Collection, tables: Tables) -> list[str]:
    out = ["## SPRA-LoRA and federated baselines", ""]
    if tables.spra.empty:
        return out + ["No federated runs in these results.", ""]
    for (scenario, backend), t in _groups(tables.spra):
        out += _section_head(coll, scenario, backend)
        measure = ", ".join(sorted(set(t["compute_measure"].dropna().astype(str)))) or "client_compute_s"
        out += ["Bytes are payload per round summed over the round's clients; compute is per client "
                "per round; accuracy and held-out loss are the server's final ones; ratios are per seed vs the same "
                f"seed's FedIT (compute ratio from {measure}) with the same client optimizer and ranks (– where no "
                "FedIT run has those ranks: a variant at other ranks is paired in the claims table). Cells: mean ± 95% t "
                "half-width (n = seeds); ⚠ = runs measured under load." + _trace_note(t), ""]
        t = t.assign(name=t["method"].map(label), flag=[f"{int(k)} ⚠" if k else "" for k in t["loaded_runs"].fillna(0)])
        out.append(markdown_table(t, [
            ("method", "name", str), ("variant", "variant", str), ("ranks", "ranks", str),
            ("uplink/round", "uplink_bytes", fmt_bytes),
            ("uplink vs FedIT", "*", stat("uplink_frac_vs_fedit", "{:.1f}", "%", 100)),
            ("downlink/round", "downlink_bytes", fmt_bytes), ("client compute (s)", "*", stat("client_compute_s")),
            ("compute vs FedIT", "*", stat("compute_frac_vs_fedit", "{:.1f}", "%", 100)),
            ("round (s)", "round_s", fmt_s), ("accuracy", "*", stat("accuracy", "{:.1f}", "%", 100)),
            ("held-out loss", "*", stat("eval_loss", "{:.3g}")), ("seeds", "seed_list", str), ("loaded", "flag", str),
        ]))
        out.append("")
        out += population_table(t)
    return out


def population_table(t: pd.DataFrame) -> list[str]:
    """The clients of a population's runs (metrics.population_run): nothing for other runs."""
    pop = t[t["virtual_round_s"].notna()] if "virtual_round_s" in t else t.iloc[:0]
    if pop.empty:
        return []
    pop = pop.assign(name=pop["method"].map(label))
    return ["Population (`federated.population`): in the table above, round (s) is the wall clock of the "
            "executors' serial work and bytes are per round over the clients that ran. Below, per sampled "
            "client: unavailable = off when sampled; late = of those that ran, past the deadline (dropped from "
            "the aggregate); bytes and client time are per finished client and round; the virtual round is the "
            "deadline when a client was late, else the slowest finished client.", "",
            markdown_table(pop, [
                ("method", "name", str), ("variant", "variant", str), ("ranks drawn", "ranks", str),
                ("sampled/round", "sampled_per_round", lambda v: fmt_num(v, 3)),
                ("unavailable", "*", stat("unavailable_frac", "{:.1f}", "%", 100)),
                ("late", "*", stat("late_frac", "{:.1f}", "%", 100)),
                ("uplink/client", "*", stat("client_uplink_bytes", "{:.1f}", " kB", 1e-3)),
                ("downlink/client", "client_downlink_bytes", fmt_bytes),
                ("client time (s)", "*", stat("client_s")), ("virtual round (s)", "*", stat("virtual_round_s")),
                ("accuracy", "*", stat("accuracy", "{:.1f}", "%", 100)), ("seeds", "seed_list", str)]), ""]


def extra_sections(tables: Tables) -> list[str]:
    out = []
    if tables.snr is not None:
        snr = tables.snr.assign(module=tables.snr["module"].map(short_module_name) if "module" in tables.snr else "SNR")
        grid = snr.pivot_table(index="rank", columns="module", values="snr", aggfunc="mean", sort=False).reset_index()
        cols = [("rank", "rank", lambda v: fmt_num(v, 4))] + [(m, m, fmt_num) for m in grid.columns if m != "rank"]
        slopes = snr_slopes(snr)
        fitted = ", ".join(f"{m}: {v:.3f}" for m, v in zip(slopes["module"], slopes["slope"]))
        out += ["## SNR of the projected gradient vs rank", "",
                "From `tables/snr.csv` (written by the SNR check). Fitted log-log slope of SNR in r "
                f"(1 = linear, the claim): {fitted}.", "", markdown_table(grid, cols), ""]
    if not tables.backends.empty:
        b = tables.backends
        out += ["## Backend agreement", "",
                "The same configuration on two backends; time ratio = this backend's mean update (or round) "
                "time over the reference backend's. Median |ratio - 1| = "
                f"{fmt_pct((b['time_ratio'] - 1).abs().median())} "
                f"over {len(b)} configurations.", "",
                markdown_table(b.assign(name=b.apply(_method_name, axis=1)), [
                    ("scenario", "scenario", str), ("method", "name", str), ("rate (Mbit/s)", "rate_mbit", fmt_rate),
                    ("rank", "rank", str), ("backend", "backend", backend_words),
                    ("vs", "reference_backend", backend_words),
                    ("time (s)", "time_s", fmt_s), ("reference (s)", "reference_time_s", fmt_s),
                    ("ratio", "time_ratio", fmt_x)]), ""]
    return out


def backend_words(name) -> str:
    """A backend as the report names it: ``tc (kernel tbf)`` (harness.backends: each backend's label)."""
    from harness.backends import REGISTRY

    return f"{name} ({REGISTRY[name].label})" if name in REGISTRY else str(name)


def bench_model(value) -> str:
    """The compress bench's ``--model`` (its CSVs' ``model`` column) in the words a claim uses for a run's
    model (collect.model_label): a model preset through its harness/conf/model/<preset>.yaml (``wide`` ->
    ``wide (LLM shape)``, ``smollm2`` -> ``SmolLM2-135M-Instruct (real)``), ``hf:PATH`` as ``model=hf`` at
    PATH; the bench's own model (``bench``) as it is."""
    import yaml

    text = str(value)
    if text.startswith("hf:"):
        return model_label({"name": "hf", "path": text[len("hf:"):]})
    preset = Path(__file__).resolve().parents[1] / "conf" / "model" / f"{text}.yaml"
    return model_label(yaml.safe_load(preset.read_text())) if preset.is_file() else text


def compress_section(results_dir: Path) -> list[str]:
    """summary.md's compressor comparison at LLM shapes, from ``tables/compress_wide.csv`` when present
    (``python -m harness.commands.compress_bench --model wide,small --csv ...``, a step of make bench)."""
    csv = Path(results_dir) / "tables" / "compress_wide.csv"
    if not csv.is_file():
        return []
    df = pd.read_csv(csv)
    df = df[df["model"].notna()]
    na = sorted(df.loc[df["err_1"].isna(), "compressor"].unique())
    df = df[df["err_1"].notna()].assign(used=lambda d: d["bytes"] / d["adapter_bytes"])
    out = ["## Compressors at LLM shapes (`tables/compress_wide.csv`)", "",
           "Real LoRA gradients (r=64 on all seven projections) of each model's shapes, 20 consecutive steps, "
           "one seed: the errors are deterministic, the throughputs (MB/s of fp32 gradient, one thread) are for "
           "ratios within one run. err_1: relative error of one step; err_ef: of the running sum with error "
           "feedback. `powersgd[subset]`: below rank 1 on every matrix, so rank 1 on a rotating subset; "
           "`powersgd-r1`: PowerSGD at its native rank-1 cost, whatever the budget."
           + (f" Not applicable at these budgets: {', '.join(na)}." if na else ""), ""]
    for model, t in df.groupby("model", sort=False):
        adapter = t["adapter_bytes"].iloc[0]
        out += [f"{bench_model(model)}, adapter gradient {fmt_bytes(adapter)} in bf16:", "",
                markdown_table(t, [("compressor", "compressor", str), ("budget", "budget", lambda v: fmt_pct(v)),
                                   ("used", "used", lambda v: fmt_pct(v, 2)), ("err_1", "err_1", fmt_num),
                                   ("err_ef", "err_ef", fmt_num), ("enc MB/s", "enc_mbs", lambda v: fmt_num(v, 3)),
                                   ("dec MB/s", "dec_mbs", lambda v: fmt_num(v, 3))]), ""]
    return out


def _interval(mean_col: str, low_col: str, high_col: str):
    def cell(r) -> str:
        m, lo, hi = r[mean_col], r[low_col], r[high_col]
        return DASH if is_nan(m) else fmt_q(m) if is_nan(lo) else f"{fmt_q(m)} [{fmt_q(lo)}, {fmt_q(hi)}]"
    cell.whole_row = True
    return cell


def compress_seeds_section(results_dir: Path) -> list[str]:
    """summary.md's compressor table over seeds, from each ``tables/compress_*_summary.csv``
    (``python -m harness.commands.compress_bench --seeds ...``, harness/commands/compress_bench/seeds.py: per row the
    mean and 95% t-interval over seeds, and err_ef paired against Spar's), with the median encode
    throughput over seeds from the per-seed ``tables/compress_*.csv`` beside it when present."""
    out: list[str] = []
    for csv in sorted((Path(results_dir) / "tables").glob("compress_*_summary.csv")):
        df = pd.read_csv(csv)
        if df.empty:
            continue
        per_seed = csv.with_name(csv.name.replace("_summary.csv", ".csv"))
        keys = ["model", "lora_rank", "compressor", "budget"]
        if per_seed.is_file():
            raw = pd.read_csv(per_seed)
            if "enc_mbs" in raw:
                df = df.merge(raw.groupby(keys, as_index=False)["enc_mbs"].median(), on=keys, how="left")
        if "enc_mbs" not in df:
            df["enc_mbs"] = float("nan")
        seeds = int(df["n"].max())
        out += [f"## Compressors on the LoRA gradients of {bench_model(df['model'].iloc[0])} (`tables/{csv.name}`)", "",
                f"One gradient stream per seed ({seeds} seeds), the same stream for every compressor; cells: mean "
                "[95% t-interval] over seeds. err_1: relative error of one step; err_ef: of the running sum with "
                "error feedback; minus Spar's: err_ef paired per seed against Spar's at the same rank and budget. "
                "enc MB/s: median over seeds of fp32 gradient encoded per second, one thread (ratios within one "
                "run). Rows that do not fit a budget are left out (`powersgd[subset]`: below rank 1 on every "
                "matrix, so rank 1 on a rotating subset).", ""]
        for rank, t in df.groupby("lora_rank", sort=False):
            out += [f"LoRA r={int(rank)}:", "",
                    markdown_table(t, [("compressor", "compressor", str), ("budget", "budget", lambda v: fmt_pct(v)),
                                       ("n", "n", lambda v: f"{int(v)}"),
                                       ("err_1", "err_1", _interval("err_1", "err_1_low", "err_1_high")),
                                       ("err_ef", "err_ef", _interval("err_ef", "err_ef_low", "err_ef_high")),
                                       ("err_ef minus Spar's", "vs_spar_err_ef",
                                        _interval("vs_spar_err_ef", "vs_spar_low", "vs_spar_high")),
                                       ("enc MB/s", "enc_mbs", lambda v: DASH if is_nan(v) else f"{v:.0f}")]), ""]
    return out


def _figure_entry(f, results_dir: Path, carries: bool) -> list[str]:
    png = next(p for p in f.paths if p.suffix == ".png")
    claim = f" *Carries: {f.carries}.*" if carries and f.carries else ""
    return [f"**{f.name}**:{claim} {f.caption} ([PDF]({png.with_suffix('.pdf').relative_to(results_dir)}))", "",
            f"![{f.name}]({png.relative_to(results_dir)})", ""]


def plots_section(plots: PlotLog, results_dir: Path) -> list[str]:
    """The figures that carry the claims (``Figure.carries``), each naming its claim; the others
    are in the appendix (``appendix_section``)."""
    out = ["## Figures that carry the claims", ""]
    main = [f for f in plots.made if f.carries]
    rest = len(plots.made) - len(main)
    if not main:
        return out + ["No figure of these results carries a claim" + (f" ({rest} in the appendix)." if rest else "."),
                      ""]
    out += [f"Each carries one claim, named in italics; {rest} more figures are in the appendix at the end." if rest
            else "Each carries one claim, named in italics.", ""]
    for f in main:
        out += _figure_entry(f, results_dir, carries=True)
    return out


def appendix_section(plots: PlotLog, results_dir: Path) -> list[str]:
    """Every other figure (and the sparsity figure when drawn), then the figures skipped and why."""
    out = ["## Appendix: more figures", ""]
    rest = [f for f in plots.made if not f.carries]
    for f in rest:
        out += _figure_entry(f, results_dir, carries=False)
    sparsity = Path(results_dir) / "plots" / "sparsity.png"
    if sparsity.is_file():
        out += ["**sparsity**: bf16 update sparsity of the adapter (the section above; `python -m "
                "harness.commands.sparsity`).", "", "![sparsity](plots/sparsity.png)", ""]
    if not rest and not sparsity.is_file():
        out += ["None.", ""]
    if plots.skipped:
        out += ["Skipped (data absent, not an error):", ""]
        out += [f"- {name}: {why}" for name, why in plots.skipped] + [""]
    return out


def runs_section(coll: Collection) -> list[str]:
    out = ["## Runs", ""]
    counts = pd.DataFrame([(r.scenario, r.backend, r.status) for r in coll.runs],
                          columns=["scenario", "backend", "status"])
    if counts.empty:
        return out + ["No runs found under `runs/`.", ""]
    summary = counts.groupby(["scenario", "backend", "status"]).size().reset_index(name="runs")
    out += [markdown_table(summary, [("scenario", "scenario", str), ("backend", "backend", str),
                                     ("status", "status", str), ("runs", "runs", str)]), ""]
    if coll.excluded:
        out += ["Left out of every table (not `ok`):", ""]
        out += [f"- `{r.scenario}/{r.run_id}`: {r.status}"
                f"{(' - ' + short_reason(in_run_paths(r.reason, r.run_id))) if r.reason else ''}"
                for r in coll.excluded] + [""]
    commits = sorted({f"{r.meta.get('git_commit') or 'unknown'}{' (dirty)' if r.meta.get('git_dirty') else ''}"
                      for r in coll.ok_runs})
    out += [f"Commits of the runs: {', '.join(commits) or DASH}.", ""]
    return out


def write_summary(coll: Collection, tables: Tables, plots: PlotLog, path: Path, command: str, *,
                  claims: pd.DataFrame | None = None, crossover: pd.DataFrame | None = None) -> Path:
    """Write summary.md; returns its path."""
    backends = coll.backends()
    lines = ["# narrowband results", "",
             f"Built by `{command}` from {len(coll.runs)} runs ({len(coll.ok_runs)} ok, "
             f"{len(coll.excluded)} left out). Link backend{'s' if len(backends) != 1 else ''}: "
             f"{', '.join(f'`{b}`' for b in backends) or DASH} (every table is split by backend). "
             "Tables: `tables/*.csv`; definitions of every derived metric: docs/report.md.", ""]
    cross = crossover_frame(tables) if crossover is None else crossover
    claims = claims_frame(tables) if claims is None else claims
    lines += headline(claims, claim_text)
    lines += claims_section(tables, claims) + plots_section(plots, coll.results_dir)
    lines += crossover_section(cross) + load_section(coll, tables) + cost_section(tables)
    lines += hilo_section(coll, tables)
    lines += sweep_section(coll, tables) + spra_section(coll, tables)
    lines += extra_sections(tables) + sparsity_section(coll.results_dir) + compress_section(coll.results_dir)
    lines += compress_seeds_section(coll.results_dir)
    lines += runs_section(coll) + appendix_section(plots, coll.results_dir)
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
