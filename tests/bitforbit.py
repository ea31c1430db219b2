"""Compare two run folders' per-step results exactly: ``python tests/bitforbit.py BEFORE AFTER``.

BEFORE and AFTER are ``out_dir`` folders (``<out_dir>/<scenario>/<run_id>/rows/*.parquet``). Runs
are paired by (scenario, variant, seed) from their run.json, so a run whose id changed (another
config hash) is still compared. Of each pair, every row (role, step) and every result column is
compared for exact equality (NaN == NaN): losses, accuracies, rewards, payload bytes, ranks,
in_sync, checksums. Left out, because they differ from one run to the next of the same code:
timings (``*_s``, ``*_ms`` measured per message), interface byte counters (``wire_bytes_*``: TCP
acknowledgements and retransmissions), which client was slowest (``straggler``), where and when
a run ran (run_id, host, device, cpus, oversubscribed). Message totals (``payload_bytes_up``,
and the federated ``payload_bytes_down``) carry a small JSON header of measured seconds (a worker's
ack, a client's timings, ``last_up_s``) whose printed digits vary, so two runs of the same code
differ there by a few bytes (measured: at most 24); they are compared to within HEADER_SLACK
bytes per row and the count of such rows is printed, while the tensor bytes beside them
(``update_bytes``, ``tensor_bytes_up``, the on-policy ``payload_bytes_down``) are exact.
Exit 0 when every pair is identical, 1 with one line per difference otherwise, 2 when a run
is missing on one side.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

# columns that measure time or the machine, not the result
ENVIRONMENT = ("run_id", "host", "device", "cpus", "oversubscribed", "straggler", "bound_s")
KEY = ("role", "step")
TIMED_HEADER = ("payload_bytes_up", "payload_bytes_down")   # totals whose JSON header holds measured seconds
HEADER_SLACK = 64                                            # bytes per row


def varies(column: str) -> bool:
    """True for a column whose value differs between two runs of the same code and config."""
    return (column in ENVIRONMENT or column.endswith("_s") or column.startswith("wire_bytes")
            or column.endswith("_wall_s"))


def runs(out_dir: Path) -> dict[tuple[str, str, int], Path]:
    """(scenario, variant, seed) -> run folder, for every complete (ok) run under ``out_dir``."""
    found: dict[tuple[str, str, int], Path] = {}
    for meta_path in sorted(out_dir.glob("*/*/run.json")):
        meta = json.loads(meta_path.read_text())
        if meta.get("status") != "ok":
            continue
        seed = int(meta["config"]["seed"])
        found[(meta["scenario"], meta["variant"], seed)] = meta_path.parent
    return found


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if a is None and isinstance(b, float) and math.isnan(b) or b is None and isinstance(a, float) and math.isnan(a):
        return True
    return a == b


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def compare_run(before: Path, after: Path, slack: list[int] | None = None) -> list[str]:
    """One line per difference between two runs' rows (empty: identical results); ``slack``
    collects the byte differences of the timed-header columns that were within HEADER_SLACK."""
    from harness.record import read_rows

    a, b = read_rows(before), read_rows(after)
    problems = []
    cols_a = {c for c in a.columns if not varies(c)}
    cols_b = {c for c in b.columns if not varies(c)}
    for c in sorted(cols_a ^ cols_b):
        problems.append(f"column {c!r} only in {'before' if c in cols_a else 'after'}")
    cols = sorted(cols_a & cols_b)
    a = a.sort_values(list(KEY)).reset_index(drop=True)
    b = b.sort_values(list(KEY)).reset_index(drop=True)
    if len(a) != len(b):
        return problems + [f"{len(a)} rows before, {len(b)} after"]
    for i in range(len(a)):
        for c in cols:
            x, y = a.at[i, c], b.at[i, c]
            x = x.item() if hasattr(x, "item") else x
            y = y.item() if hasattr(y, "item") else y
            if c in TIMED_HEADER and isinstance(x, (int, float)) and isinstance(y, (int, float)) \
                    and abs(x - y) <= HEADER_SLACK:
                if x != y and slack is not None:
                    slack.append(int(abs(x - y)))
                continue
            if not _same(x, y):
                problems.append(f"{a.at[i, 'role']} step {a.at[i, 'step']}: {c} {_short(x)} != {_short(y)}")
    return problems


def compare(before: Path, after: Path) -> int:
    """Print the comparison of every paired run; the exit status (0 same, 1 differs, 2 unpaired)."""
    from harness.record import read_rows

    ra, rb = runs(before), runs(after)
    status = 0
    for key in sorted(set(ra) | set(rb)):
        name = f"{key[0]}/{key[1]} seed {key[2]}"
        if key not in ra or key not in rb:
            print(f"MISSING {name}: only {'before' if key in ra else 'after'}")
            status = 2
            continue
        slack: list[int] = []
        problems = compare_run(ra[key], rb[key], slack)
        rows = len(read_rows(ra[key]))
        if problems:
            status = max(status, 1)
            print(f"DIFFERS {name}: {len(problems)} difference(s)")
            for p in problems[:20]:
                print(f"    {p}")
        else:
            note = f"; {len(slack)} timed-header totals within {max(slack)} B" if slack else ""
            print(f"same    {name} ({rows} rows{note}; {ra[key].name} -> {rb[key].name})")
    return status


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python tests/bitforbit.py BEFORE_OUT_DIR AFTER_OUT_DIR", file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(compare(Path(sys.argv[1]), Path(sys.argv[2])))
