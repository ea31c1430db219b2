"""The claims table in short form: method, claim, where, estimate [95% interval], verdict, model.

One reader of results/tables/claims.csv (written by harness.report.claims) for the two places
that show a short table: the end of ``make bench`` (a terminal screen) and the README's front
page (markdown). The wide table, with rules, seeds and notes, stays in results/summary.md.

    python -m harness.report.brief [--markdown] [--claims results/tables/claims.csv]
    python -m harness.report.brief --readme README.md     # rewrite the README's claims block
    python -m harness.report.brief --claims results/real/tables/claims.csv --readme README.md --block claims-real

Each README block lies between ``<!-- NAME:begin`` and ``<!-- NAME:end -->`` (BLOCKS: ``claims``
for results/tables/claims.csv, ``claims-real`` for the real model's, ``claims-spra-real`` for SPRA's on
it); a test checks that each equals this module's table of its committed claims.csv, so they cannot drift.

The model column is the claims table's own ``model`` column (harness.report.claims: the model
the claim's runs recorded in run.json, harness.report.collect.model_label). Only for a claims file
that lacks the column (one written before it, or a row without a model) is the model read off the
scenario named in ``where``: the scenario composed again with Hydra, its ``model`` labelled the
same way, or "–" when it no longer composes. That lookup after the fact is wrong for a run that
set ``model=...`` on the command line, which is why claims.csv carries the column.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from harness.paths import results_root
from harness.report.collect import model_label

PERCENT = ("bytes_frac", "bytes_frac_max", "uplink_frac_vs_fedit", "compute_frac_vs_fedit", "quality_retained")
TIMES = ("speedup",)


def claims_path(root: Path | None = None) -> Path:
    return (root or results_root()) / "tables" / "claims.csv"


def _number(value: float, statistic: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if statistic in PERCENT:
        return f"{100 * value:.1f}%" if abs(value) >= 0.1 else f"{100 * value:.2f}%"
    if statistic in TIMES:
        return f"{value:.2f}x"
    return f"{value:+.3f}" if "-" in statistic else f"{value:.3f}"


def estimate(row: pd.Series) -> str:
    """``3.59x [3.24, 3.94]`` in the claim's own unit; a cap's ``max 1.60%``; a censored estimate
    ``>= 0.61 [...], 2 censored`` (a lower bound)."""
    stat = str(row.get("statistic", ""))
    point = _number(row["estimate"], stat)
    if str(row.get("test", "")) == "cap":
        return f"max {point}"
    censored = row.get("censored")
    censored = str(censored) if isinstance(censored, str) and censored else ""
    head, tail = (">= ", f", {censored.split(' of ')[0]} censored") if censored else ("", "")
    low, high = row.get("ci_low"), row.get("ci_high")
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return head + point + tail
    return f"{head}{point} [{_number(low, stat)}, {_number(high, stat)}]{tail}"


def verdict_text(row: pd.Series) -> str:
    """The claim's verdict, and Holm's where the adjustment for the table's claims withdraws it."""
    v, holm = str(row["verdict"]), row.get("verdict_holm")
    return v if not isinstance(holm, str) or not holm or holm == v else f"{v} (Holm: {holm})"


def _scenario_model(scenario: str) -> str:
    """The fallback for a claims file without a ``model`` column (module docstring): the model of the
    scenario as it composes now, not as its runs ran."""
    from harness.errors import ConfigError

    try:
        from harness.compose import compose_config
        model = compose_config([f"scenario={scenario}"]).model
        return model_label({"name": model.get("name"), "path": model.get("path")})
    except (ConfigError, Exception):  # noqa: BLE001 - a scenario that no longer composes is "–", not a crash
        return "–"


def compact_where(where: str, model: str = "", keep_model: bool = False) -> str:
    """``hilo_distill 10 Mbit/s`` / ``spra_federated sgd vs fedit``: the scenario and what tells rows apart.

    claims.csv's ``where`` names its ``model`` after the scenario label; that text is taken out (the
    brief has a model column of its own), or kept right after the scenario with ``keep_model``."""
    import re

    scenario = where.split(" ", 1)[0]
    if model:
        where = where.replace(f" {model}", "", 1)
    parts = [scenario] + ([model] if model and keep_model else [])
    rate = re.search(r"((?:[\d.]+(?:, | and ))*[\d.]+ Mbit/s|trace[^,]*)", where)
    parts += [rate.group(1)] if rate else []
    opt = re.search(r"optimizer (\w+)", where)
    parts += [opt.group(1)] if opt else []
    pair = re.search(r", ((?:\w+ )?vs [^,]+)$", where)
    if pair and " bf16" not in pair.group(1):
        parts.append(pair.group(1))
    return " ".join(parts)


def short_horizon(text) -> str:
    """claims.csv's ``horizon`` in a few words: ``80 updates, not plateaued``, ``equal time (15.9 s)``,
    ``time to 95%``, ``per update``, ``final round (36)``."""
    import re

    if not isinstance(text, str) or not text:
        return ""
    updates = re.match(r"equal updates: final evaluation after (\d+) updates", text)
    if updates:
        state = ("not plateaued" if "NOT plateaued" in text else "no rise shown" if "no significant rise" in text
                 else "plateaued" if " plateaued:" in text else "plateau not judged")
        return f"{updates.group(1)} updates, {state}"
    when = re.match(r"equal wall-clock: when the faster finishes(?: \(mean ([\d.]+) s[;)])?", text)
    if when:
        return f"equal time ({when.group(1)} s)" if when.group(1) else "equal time"
    if text.startswith("equal wall-clock: time to"):
        return "time to " + text.split("time to ", 1)[1].split(" ", 1)[0]
    rounds = re.match(r"final round \((\d+) rounds\)", text)
    if rounds:
        return f"final round ({rounds.group(1)})"
    return text.split(" (", 1)[0]


def _claim(text: str) -> str:
    """The claim without a trailing parenthetical note, except a reading's name, kept short: "client
    compute <= 50% of FedIT (reading 2: LoRA's own FLOPs over ...)" -> "... (LoRA's own FLOPs)", so that
    two readings of one claim stay two different rows."""
    head, sep, note = text.rpartition(" (")
    if not (sep and text.endswith(")")):
        return text
    note = note[:-1]
    if note.startswith("reading ") and ": " in note:
        return f"{head} ({note.split(': ', 1)[1].split(' over ')[0]})"
    return head


def short_frame(claims: pd.DataFrame) -> pd.DataFrame:
    """One row per claim row: method, claim, where (compact_where), estimate [CI], verdict, n, model (+ horizon)."""
    cache: dict[str, str] = {}
    rows = []
    for _, row in claims.iterrows():
        where = str(row.get("where", ""))
        scenario = where.split(" ", 1)[0]
        recorded = row.get("model") if "model" in claims.columns else None
        if isinstance(recorded, str) and recorded:
            model = recorded                  # the claim's runs' own (claims.csv, from run.json)
        else:                                 # a claims file from before the column
            model = cache.setdefault(scenario, _scenario_model(scenario))
        short = {"method": row["method"], "claim": _claim(str(row["claim"])),
                 "where": compact_where(where, recorded if isinstance(recorded, str) else ""),
                 "estimate [95% CI]": estimate(row),
                 "verdict": verdict_text(row), "n": int(row["n_seeds"]) if not pd.isna(row["n_seeds"]) else 0,
                 "model": model}
        if "horizon" in claims.columns:
            short["horizon"] = short_horizon(row.get("horizon", ""))
        rows.append(short)
    return pd.DataFrame(rows)


def markdown(frame: pd.DataFrame) -> str:
    cols = list(frame.columns)
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    out += ["| " + " | ".join(str(v) for v in r) + " |" for r in frame.itertuples(index=False)]
    return "\n".join(out)


def screen(frame: pd.DataFrame, width: int = 160) -> str:
    """A plain-text table for the terminal, one claim a line, cut to ``width``."""
    cols = list(frame.columns)
    widths = {c: max(len(c), *(len(str(v)) for v in frame[c])) if len(frame) else len(c) for c in cols}
    widths["claim"] = min(widths["claim"], 40)
    widths["where"] = min(widths["where"], 32)
    line = lambda vals: "  ".join(str(v)[: widths[c]].ljust(widths[c]) for c, v in zip(cols, vals))[:width]  # noqa: E731
    return "\n".join([line(cols), *(line([r[c] for c in cols]) for _, r in frame.iterrows())])


# The README's blocks, by name: "claims" (results/tables/claims.csv: the tiny and wide models),
# "claims-real" (results/real/tables/claims.csv: the real model, make bench's own) and "claims-spra-real"
# (results/spra_real/tables/claims.csv: SPRA-LoRA on the real model, an optional step's). results/real_bytes has
# no block: its one new claim (HiLo at low-rank's bytes) is in the README's words, its other rows repeat 3 of
# results/real's 5 seeds.
BLOCKS = {"claims": Path("results/tables/claims.csv"), "claims-real": Path("results/real/tables/claims.csv"),
          "claims-spra-real": Path("results/spra_real/tables/claims.csv")}


def _markers(block: str) -> tuple[str, str]:
    return f"<!-- {block}:begin", f"<!-- {block}:end -->"


def _split(text: str, block: str) -> tuple[str, str, str]:
    """(everything up to and including the begin marker's line, the table, the end marker and after)."""
    begin, end = _markers(block)
    head, _, rest = text.partition(begin)
    if not rest or end not in rest:
        raise ValueError(f"no {begin} ... {end} block")
    marker_line, body = rest.split("\n", 1)
    table, tail = body.split(end, 1)
    return f"{head}{begin}{marker_line}\n", table.rstrip("\n"), f"{end}{tail}"


def readme_block(text: str, block: str = "claims") -> str:
    """The table between the README's markers of ``block`` (the marker lines excluded)."""
    return _split(text, block)[1]


def rewrite_readme(path: Path, table: str, block: str = "claims") -> None:
    head, _, tail = _split(path.read_text(encoding="utf-8"), block)
    path.write_text(f"{head}{table.rstrip(chr(10))}\n{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.report.brief", description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=Path, default=None, help="claims.csv (default results/tables/claims.csv)")
    parser.add_argument("--markdown", action="store_true", help="a markdown table (the README's) instead of text")
    parser.add_argument("--readme", type=Path, default=None, help="rewrite this file's claims block with the table")
    parser.add_argument("--block", default="claims", choices=sorted(BLOCKS),
                        help="which of the README's blocks --readme rewrites (default claims)")
    args = parser.parse_args(argv)
    path = args.claims or claims_path()
    if not path.is_file():
        print(f"error: --claims: {str(path)!r} does not exist; python -m harness.report writes it")
        return 2
    frame = short_frame(pd.read_csv(path))
    if args.readme:
        rewrite_readme(args.readme, markdown(frame), args.block)
        print(f"{args.readme}: claims block rewritten ({len(frame)} claims)")
        return 0
    print(markdown(frame) if args.markdown else screen(frame))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
