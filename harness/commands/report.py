"""``python -m harness.report [--results DIR] [--out DIR] [--reference]``: tables, plots and summary.md
from DIR/runs.

Your own runs and report live in ``outputs/`` (git-ignored; the runs' default ``out_dir`` is
``outputs/runs``). The committed references (``results/``, ``results/real/``, each with a
REFERENCE.json) are written only with ``--reference``, from their complete reference runs, which
``make bench`` passes (harness/report/reference.py).
"""
from __future__ import annotations

import argparse
import sys

from harness.errors import ConfigError
from harness.report.build import build_report, one_screen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default="outputs", help="folder holding runs/ (default: outputs)")
    parser.add_argument("--out", default=None, help="folder the tables, plots and summary.md go to (default: --results)")
    parser.add_argument("--reference", action="store_true",
                        help="rebuild a committed reference (results/ or results/real/) from its complete "
                             "reference runs (make bench does this)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    command = " ".join(["python -m harness.report"] + (["--results", args.results] if args.results != "outputs" else [])
                       + (["--out", args.out] if args.out else []) + (["--reference"] if args.reference else []))
    try:
        report = build_report(args.results, progress=not args.no_progress, command=command, out=args.out,
                              reference=args.reference)
    except (FileNotFoundError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(one_screen(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
