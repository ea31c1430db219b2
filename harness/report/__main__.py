"""``python -m harness.report [--results DIR]``: tables, plots and summary.md from DIR/runs."""
from __future__ import annotations

import argparse
import sys

from harness.report.build import build_report, one_screen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report", description=__doc__)
    parser.add_argument("--results", default="results", help="folder holding runs/ (default: results)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    command = "python -m harness.report" + (f" --results {args.results}" if args.results != "results" else "")
    try:
        report = build_report(args.results, progress=not args.no_progress, command=command)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(one_screen(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
