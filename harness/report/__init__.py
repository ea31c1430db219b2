"""Report: collect every run under results/ into tables (CSV, markdown) and paper plots.

    python -m harness.report [--results DIR]      # or: make report

Public API: ``build_report(results_dir) -> dict`` (everything), ``collect`` (runs and rows),
``build_tables`` / ``write_tables`` (CSVs), the ``plot_*`` functions in harness.report.plots
(one figure kind each), and the metric definitions in harness.report.metrics (on-policy) and metrics_federated.
"""
from harness.report.build import build_report, draw_all, one_screen
from harness.report.collect import Collection, Run, collect
from harness.report.tables import Tables, build_tables, write_tables

__all__ = ["build_report", "draw_all", "one_screen", "collect", "Collection", "Run", "Tables",
           "build_tables", "write_tables"]
