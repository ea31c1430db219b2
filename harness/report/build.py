"""``build_report(results_dir)``: runs -> tables (CSV) -> plots (PNG, PDF) -> summary.md.

Reads only ``results_dir/runs`` (and ``results_dir/tables/snr.csv`` when present); writes
``results_dir/tables/{hilo,spra,sweep,hilo_runs,spra_runs,claims,crossover[,backends]}.csv``, ``results_dir/plots/*.{png,pdf}``
and ``results_dir/summary.md``. Idempotent: running it twice gives the same files.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm import tqdm

from harness.report import federated_plots as F
from harness.report import plots as P
from harness.report.claims import claims_frame, crossover_frame
from harness.report.collect import Collection, collect
from harness.report.metrics import onpolicy_curves
from harness.report.metrics_federated import federated_curves
from harness.report.phases import plot_phases
from harness.report.summary import write_summary
from harness.report.textfmt import claim_text, short_reason
from harness.report.tables import Tables, build_tables, write_tables
from harness.report.twins import borrow_quality


def draw_all(coll: Collection, tables: Tables, plots_dir: Path, progress: bool = False) -> P.PlotLog:
    """Every figure that the collected results allow; the log says what was skipped and why."""
    log = P.PlotLog()
    op, fed = borrow_quality(onpolicy_curves(coll.rows), coll.rows), federated_curves(coll.rows)
    steps = [
        ("quality vs bytes", lambda: P.plot_quality_vs_bytes(op, plots_dir, log)),
        ("quality vs time", lambda: P.plot_quality_vs_time(op, plots_dir, log)),
        ("speedup vs rate", lambda: P.plot_speedup_vs_rate(tables.hilo, plots_dir, log)),
        ("frontier", lambda: P.plot_frontier(tables.hilo, plots_dir, log)),
        ("bytes vs rank", lambda: P.plot_bytes_vs_rank(tables.hilo, plots_dir, log)),
        ("spar ranks", lambda: P.plot_spar_ranks(coll.rows, plots_dir, log)),
        ("federated vs rounds", lambda: F.plot_federated_rounds(fed, plots_dir, log, tables.spra)),
        ("federated vs uplink", lambda: F.plot_federated_uplink(fed, plots_dir, log, tables.spra)),
        ("federated ablations", lambda: F.plot_federated_ablations(fed, plots_dir, log, tables.spra)),
        ("snr vs rank", lambda: P.plot_snr(tables.snr, plots_dir, log)),
        ("phases", lambda: plot_phases(tables.hilo_runs, plots_dir, log)),
    ]
    for name, draw in tqdm(steps, desc="plots", unit="fig", disable=not progress, leave=False):
        draw()
    return log


TABLE_KINDS = ("speedup_vs_rate", "frontier", "bytes_vs_rank", "phases", "snr_vs_rank", "sparsity")


def draw_from_tables(results_dir: Path | str, plots_dir: Path | str) -> P.PlotLog:
    """The figures the written tables hold enough to redraw, without ``runs/`` (a clone ships
    ``results/tables`` but not the runs): speedup_vs_rate, frontier and bytes_vs_rank from
    ``tables/hilo.csv``, phases from ``tables/hilo_runs.csv``, snr_vs_rank from ``tables/snr.csv``
    and the sparsity figure from ``tables/sparsity.csv``, into ``plots_dir``. The curve figures
    (quality_vs_*, fed_*) and spar_ranks need the runs' per-update rows, which no table keeps.
    Nothing is pruned and summary.md is not written: pass a folder of its own."""
    import pandas as pd

    from harness.report.sparsity_plot import plot_sparsity
    from harness.report.tables import read_snr

    tables, plots_dir, log = Path(results_dir) / "tables", Path(plots_dir), P.PlotLog()
    read = lambda name: pd.read_csv(tables / name) if (tables / name).is_file() else pd.DataFrame()  # noqa: E731
    hilo, runs = read("hilo.csv"), read("hilo_runs.csv")
    if hilo.empty:
        log.skip("speedup_vs_rate, frontier, bytes_vs_rank", "tables/hilo.csv absent")
    else:
        P.plot_speedup_vs_rate(hilo, plots_dir, log)
        P.plot_frontier(hilo, plots_dir, log)
        P.plot_bytes_vs_rank(hilo, plots_dir, log)
    plot_phases(runs, plots_dir, log)
    P.plot_snr(read_snr(tables), plots_dir, log)
    if (tables / "sparsity.csv").is_file():
        paths = plot_sparsity(pd.read_csv(tables / "sparsity.csv"), plots_dir / "sparsity")
        log.made.append(P.Figure("sparsity", "bf16 update sparsity of the adapter (tables/sparsity.csv).", paths))
    return log


KINDS = ("quality_vs_bytes", "quality_vs_time", "speedup_vs_rate", "frontier", "bytes_vs_rank", "spar_ranks",
         "fed_accuracy_vs_rounds", "fed_accuracy_vs_uplink", "fed_ablations", "snr_vs_rank", "phases")


def prune_stale(plots_dir: Path, made: list[Path]) -> list[Path]:
    """Remove figures of ours (by name) that this build did not draw: results/ shows one build."""
    keep = {p.resolve() for p in made}
    stale = [p for p in sorted(Path(plots_dir).glob("*")) if p.suffix in (".png", ".pdf")
             and p.stem.split("-")[0] in KINDS and p.resolve() not in keep]
    for p in stale:
        p.unlink()
    return stale


def build_report(results_dir: Path | str = "outputs", *, progress: bool = False, command: str | None = None,
                 out: Path | str | None = None, reference: bool = False) -> dict[str, Any]:
    """Build every table, plot and summary.md from the runs under ``results_dir/runs`` into ``out``
    (default ``results_dir``); returns what was made. A folder holding a committed reference is
    written only with ``reference=True``, and then only from its complete reference runs
    (harness/report/reference.py); otherwise a ConfigError before any file is written.

    Returned keys: ``summary`` (Path), ``tables`` (name -> DataFrame), ``csv`` (written
    paths), ``plots`` (written paths), ``skipped`` ((plot, reason) list), ``excluded``
    ((scenario/run_id, status, reason) list), ``runs`` and ``ok_runs`` (counts), ``backends``.
    """
    from harness.report.reference import guard_output, load_manifest, select_reference

    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise FileNotFoundError(f"--results: {str(results_dir)!r} is not a directory; "
                                "point it at the folder holding runs/ (default: outputs)")
    out_dir = Path(out) if out is not None else results_dir
    guard_output(out_dir, reference)
    coll = collect(out_dir, runs_from=results_dir)
    if reference:
        coll = select_reference(coll, load_manifest(out_dir))
    results_dir = out_dir
    tables = build_tables(coll)
    csv = write_tables(tables, results_dir / "tables")
    claims, cross = claims_frame(tables), crossover_frame(tables)
    for name, frame in (("claims", claims), ("crossover", cross)):
        frame.to_csv(results_dir / "tables" / f"{name}.csv", index=False, float_format="%.10g")
        csv.append(results_dir / "tables" / f"{name}.csv")
    log = draw_all(coll, tables, results_dir / "plots", progress=progress)
    prune_stale(results_dir / "plots", log.paths())
    sparsity = results_dir / "tables" / "sparsity.csv"     # python -m harness.commands.sparsity (one process)
    if sparsity.is_file():
        import pandas as pd

        from harness.report.sparsity_plot import plot_sparsity

        plot_sparsity(pd.read_csv(sparsity), results_dir / "plots" / "sparsity")
    command = command or f"python -m harness.report --results {results_dir}"
    summary = write_summary(coll, tables, log, results_dir / "summary.md", command, claims=claims, crossover=cross)
    return {
        "summary": summary,
        "tables": {"hilo": tables.hilo, "spra": tables.spra, "sweep": tables.sweep, "backends": tables.backends,
                   "claims": claims, "crossover": cross, "hilo_runs": tables.hilo_runs,
                   "spra_runs": tables.spra_runs},
        "csv": csv,
        "plots": log.paths(),
        "figures": log.made,
        "skipped": log.skipped,
        "excluded": [(f"{r.scenario}/{r.run_id}", r.status, short_reason(r.reason)) for r in coll.excluded],
        "runs": len(coll.runs),
        "ok_runs": len(coll.ok_runs),
        "backends": coll.backends(),
    }


def one_screen(report: dict[str, Any]) -> str:
    """The summary printed at the end of ``python -m harness.report``."""
    lines = [f"narrowband report: {report['ok_runs']}/{report['runs']} runs ok, "
             f"backends: {', '.join(report['backends']) or '-'}"]
    claims = report["tables"]["claims"]
    for _, c in claims.iterrows():
        lines.append(f"  {c['method']}: {c['claim']}: {claim_text(c)} -> {c['verdict']}  ({c['where']})")
    for x in claims.attrs.get("unjudged_lines", []):
        lines.append(f"  not judged: {x['method']}: {x['claim']} ({x['where']}): {x['why']}")
    lines.append(f"  tables: {', '.join(p.name for p in report['csv'])}; "
                 f"plots: {len(report['plots']) // 2} figures (PNG+PDF)")
    for name, why in report["skipped"]:
        lines.append(f"  skipped plot {name}: {why}")
    for run, status, reason in report["excluded"]:
        lines.append(f"  left out {run}: {status}{(' - ' + reason) if reason else ''}")
    lines.append(f"  summary: {report['summary']}")
    return "\n".join(lines)
