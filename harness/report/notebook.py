"""What the analysis notebooks share: where results are, and showing tables and figures.

A notebook runs both as a plain script (``python notebooks/X.py --results DIR``) and in
Jupyter (jupytext); ``results_dir`` takes ``--results``, else $NARROWBAND_RESULTS, else
``results``. ``show`` renders in Jupyter and prints in a terminal.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd

from harness.report.figkit import PlotLog

ENV = "NARROWBAND_RESULTS"


def results_dir(argv: list[str] | None = None) -> Path:
    """--results DIR, else $NARROWBAND_RESULTS, else ./results; fails clearly if it is not a folder."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--results", default=None)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)   # Jupyter adds its own flags
    path = Path(args.results or os.environ.get(ENV) or "results")
    if not path.is_dir():
        raise SystemExit(f"--results / ${ENV}: {str(path)!r} is not a directory; "
                         "point it at the folder holding runs/")
    return path


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def show(obj, title: str = "") -> None:
    """A DataFrame as a table (Jupyter) or text (terminal)."""
    if title:
        print(f"\n== {title} ==")
    if _in_ipython():
        from IPython.display import display
        display(obj)
    elif isinstance(obj, pd.DataFrame):
        with pd.option_context("display.width", 160, "display.max_columns", 30, "display.precision", 4):
            print(obj.to_string(index=False) if len(obj) else "(empty)")
    else:
        print(obj)


def show_figures(log: PlotLog) -> None:
    """Each figure drawn (inline in Jupyter, its path in a terminal), then what was skipped."""
    for fig in log.made:
        png = next(p for p in fig.paths if p.suffix == ".png")
        if _in_ipython():
            from IPython.display import Image, display
            display(Image(filename=str(png)))
        print(f"{png}  ({fig.caption})")
    for name, why in log.skipped:
        print(f"skipped {name}: {why}")
