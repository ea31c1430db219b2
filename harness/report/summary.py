"""``results/summary.md``: the paper-style tables, the figures, and the runs left out.

Every table section names its scenario, its backend and the exact command(s) that
produced its runs. Units: MB = 10^6 bytes, kB = 10^3 bytes, seconds, Mbit/s.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from harness.report.claims import claims_frame, verdict
from harness.report.collect import Collection
from harness.report.metrics import TARGET_FRACTION
from harness.report.plots import PlotLog, short_module_name
from harness.report.style import label
from harness.report.tables import Tables, snr_slopes

DASH = "–"


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt_bytes(v) -> str:
    if _nan(v):
        return DASH
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.3g} {unit}"
    return f"{v:.0f} B"


def fmt_pct(v, digits: int = 1) -> str:
    return DASH if _nan(v) else f"{100 * v:.{digits}f}%"


def fmt_x(v) -> str:
    return DASH if _nan(v) else f"{v:.2f}×"


def fmt_num(v, digits: int = 3) -> str:
    return DASH if _nan(v) else f"{v:.{digits}g}"


def fmt_q(v) -> str:
    return DASH if _nan(v) else f"{v:.3f}"


def fmt_s(v) -> str:
    if _nan(v):
        return DASH
    return f"{v:.3f}" if abs(v) < 1 else f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def fmt_rate(v) -> str:
    return "unshaped" if _nan(v) else f"{v:g}"


def short_reason(reason: str) -> str:
    """A failure reason on one line: its first line, and its last when it spans several (a traceback)."""
    lines = [x.strip() for x in str(reason).splitlines() if x.strip()]
    return " … ".join([lines[0], lines[-1]]) if len(lines) > 2 else " ".join(lines)


def markdown_table(frame: pd.DataFrame, columns: list[tuple[str, str, Callable]]) -> str:
    """Render ``frame`` with (header, column, formatter) triples; numbers right-aligned."""
    head = "| " + " | ".join(h for h, _, _ in columns) + " |"
    rule = "|" + "|".join("---:" if f is not str else "---" for _, _, f in columns) + "|"
    body = ["| " + " | ".join(f(r[c]) if f is not str else str(r[c]) for _, c, f in columns) + " |"
            for _, r in frame.iterrows()]
    return "\n".join([head, rule, *body])


def _section_head(coll: Collection, scenario: str, backend: str) -> list[str]:
    cmds = coll.commands(scenario, backend)
    shown = "\n".join(f"    {c}" for c in cmds[:4]) + (f"\n    … and {len(cmds) - 4} more" if len(cmds) > 4 else "")
    return [f"### Scenario `{scenario}` · backend `{backend}`", "", "Command:", "", shown, ""]


def _groups(frame: pd.DataFrame, by: Iterable[str] = ("scenario", "backend")):
    return frame.groupby(list(by), sort=True) if len(frame) else []


def _method_name(r: pd.Series) -> str:
    return label(r["method"], r.get("compressor"))


def is_grid(t: pd.DataFrame) -> bool:
    """A rate x rank sweep: more than one link rate and more than one training rank."""
    return t["rate_mbit"].nunique() > 1 and t["ref_rank"].nunique() > 1


def claims_section(tables: Tables) -> list[str]:
    out = ["## Claims, as measured here", ""]
    frame = claims_frame(tables)
    if frame.empty:
        return out + ["No run in these results measures a headline claim (HiLo + Spar with a full-sync "
                      "baseline, or SPRA with FedIT).", ""]
    frame = frame.assign(verdict=frame["met"].map(verdict))
    return out + [markdown_table(frame, [("method", "method", str), ("claim", "claim", str),
                                         ("where", "where", str), ("measured", "measured", str),
                                         ("verdict", "verdict", str)]), ""]


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
        metric = ", ".join(sorted(set(t["quality_metric"].dropna().astype(str))))
        out += _section_head(coll, scenario, backend)
        refs = sorted({f"`{v}`" + (f" ({d})" if d else "") for v, d in
                       zip(t["baseline_variant"], t["baseline_dtype"].fillna("")) if v})
        out += [f"Quality = final held-out {metric} after {int(t['updates'].max())} updates; bytes = "
                "downlink payload per update per worker (incl. resyncs); speedup and retained quality are "
                "vs full sync at the same link and training rank "
                f"(reference run: {', '.join(refs) or 'none found'}); seeds averaged.", ""]
        out.append(markdown_table(t, [
            ("task", "task", str), ("method", "name", str), ("rank", "rank", lambda v: fmt_num(v, 4)),
            ("rate (Mbit/s)", "rate_mbit", fmt_rate), ("bytes/update", "bytes_per_update", fmt_bytes),
            ("% of full sync", "bytes_frac", lambda v: fmt_pct(v, 2)), ("update (s)", "update_s", fmt_s),
            ("speedup", "speedup", fmt_x), ("quality", "quality", fmt_q),
            ("retained", "quality_retained", fmt_pct), ("in sync", "in_sync_frac", fmt_pct),
            (f"time to {TARGET_FRACTION:.0%} (s)", "time_to_target_s", fmt_s),
            ("wire eff.", "wire_efficiency", fmt_pct), ("seeds", "seeds", lambda v: fmt_num(v, 2)),
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
        out += ["Each cell: update speedup vs full sync · bytes per update as % of full sync · quality "
                "retained, all vs full sync at the same rate and training rank.", ""]
        for (method, compressor), g in t[t["method"] != "full_sync"].groupby(["method", "compressor"], sort=True):
            cell = g.assign(text=[f"{fmt_x(s)} · {fmt_pct(b, 2)} · {fmt_pct(q)}" for s, b, q
                                  in zip(g["speedup"], g["bytes_frac"], g["quality_retained"])])
            grid = cell.pivot_table(index="rate_mbit", columns="rank", values="text", aggfunc="first")
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
        out += ["Bytes are payload per round summed over the round's clients; compute is per client "
                "per round; accuracy is the server's final held-out accuracy; ratios are vs FedIT.", ""]
        out.append(markdown_table(t.assign(name=t["method"].map(label)), [
            ("method", "name", str), ("variant", "variant", str), ("ranks", "ranks", str),
            ("uplink/round", "uplink_bytes", fmt_bytes), ("uplink vs FedIT", "uplink_frac_vs_fedit", fmt_pct),
            ("downlink/round", "downlink_bytes", fmt_bytes), ("client compute (s)", "client_compute_s", fmt_s),
            ("compute vs FedIT", "compute_frac_vs_fedit", fmt_pct), ("round (s)", "round_s", fmt_s),
            ("accuracy", "accuracy", fmt_pct), ("seeds", "seeds", lambda v: fmt_num(v, 2)),
        ]))
        out.append("")
    return out


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
                    ("rank", "rank", str), ("backend", "backend", str), ("vs", "reference_backend", str),
                    ("time (s)", "time_s", fmt_s), ("reference (s)", "reference_time_s", fmt_s),
                    ("ratio", "time_ratio", fmt_x)]), ""]
    return out


def plots_section(plots: PlotLog, results_dir: Path) -> list[str]:
    out = ["## Figures", ""]
    for f in plots.made:
        png = next(p for p in f.paths if p.suffix == ".png")
        out += [f"**{f.name}**: {f.caption} ([PDF]({png.with_suffix('.pdf').relative_to(results_dir)}))", "",
                f"![{f.name}]({png.relative_to(results_dir)})", ""]
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
        out += [f"- `{r.scenario}/{r.run_id}`: {r.status}{(' - ' + short_reason(r.reason)) if r.reason else ''}"
                for r in coll.excluded] + [""]
    commits = sorted({f"{r.meta.get('git_commit') or 'unknown'}{' (dirty)' if r.meta.get('git_dirty') else ''}"
                      for r in coll.ok_runs})
    out += [f"Commits of the runs: {', '.join(commits) or DASH}.", ""]
    return out


def write_summary(coll: Collection, tables: Tables, plots: PlotLog, path: Path, command: str) -> Path:
    """Write summary.md; returns its path."""
    backends = coll.backends()
    lines = ["# narrowband results", "",
             f"Built by `{command}` from {len(coll.runs)} runs ({len(coll.ok_runs)} ok, "
             f"{len(coll.excluded)} left out). Link backend{'s' if len(backends) != 1 else ''}: "
             f"{', '.join(f'`{b}`' for b in backends) or DASH} (every table is split by backend). "
             "Tables: `tables/*.csv`; definitions of every derived metric: docs/report.md.", ""]
    lines += claims_section(tables) + hilo_section(coll, tables)
    lines += sweep_section(coll, tables) + spra_section(coll, tables)
    lines += extra_sections(tables) + plots_section(plots, coll.results_dir) + runs_section(coll)
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path
