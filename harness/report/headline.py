"""summary.md's headline: what the claims say, in words, at the top (written from claims.csv).

Three bullets a reader can stop after: what held (verdict ``met``), what did not (``not met``),
and what is undecided (``inconclusive``, and how many lines had too few seeds to be judged at all),
with the undecided nearest to a verdict by the seeds the claims table says 80% power needs. A
line whose Holm-adjusted verdict differs says so. Lines of one claim are named together with their
settings (``hilo_distill 10 Mbit/s``), each with its estimate, interval and n, rounded to the digits
the interval supports (harness.report.textfmt.claim_text).

Reads the claims frame's columns as claims.csv has them: method, claim, where, model, estimate,
ci_low, ci_high, n_seeds (or n), verdict, verdict_holm, statistic, seeds_80 and resolves (older
tables: seeds_to_resolve), and the frame's ``attrs["unjudged_lines"]`` (lines with fewer than 2 seeds).
"""
from __future__ import annotations

import math
from typing import Callable

import pandas as pd

SHOWN = 3          # settings named per claim before "and N more"
CLAIMS = 6         # claims named per verdict before "and N more claims"
NEAREST = 3        # undecided claims named as the nearest to a verdict


def seeds_of(c: pd.Series) -> int:
    """n: the seeds a claim row rests on (claims.csv's ``n_seeds``, or ``n``)."""
    for key in ("n_seeds", "n"):
        if key in c and c[key] == c[key] and c[key] is not None:
            return int(c[key])
    return 0


def setting(c: pd.Series, scenario: bool = True) -> str:
    """Where a claim row was measured, short: its ``where`` without the backend and the model
    ('hilo_distill [tc] tiny (toy) 10 Mbit/s, r=64, vs full_sync bf16' -> 'hilo_distill 10 Mbit/s, r=64,
    vs full_sync bf16'; without the scenario when ``scenario`` is False, for a table headed by it)."""
    where, model = str(c.get("where", "")), str(c.get("model", "") or "")
    if not (model and model in where):
        return where
    head, _, rest = where.partition(model)
    name = head.split(" [", 1)[0].strip()
    return (f"{name} {rest.strip()}" if scenario else rest.strip()).strip()


def _estimate(text: Callable[[pd.Series], str], c: pd.Series) -> str:
    """'2.50× [2.31×, 2.69×], n=5' from the table's '2.50× [2.31×, 2.69×] (n=5)'; the Holm verdict when it differs."""
    value = text(c)
    value = value[:-1].replace(" (n=", ", n=") if value.endswith(")") and " (n=" in value else value
    holm = c.get("verdict_holm")
    if isinstance(holm, str) and holm and holm != c.get("verdict"):
        value += f"; {holm} after Holm's adjustment"
    return value


def _seeds_needed(frame: pd.DataFrame) -> pd.Series:
    """Seeds that would decide each line: ``seeds_80`` (80% power), else an older table's ``seeds_to_resolve``."""
    for column in ("seeds_80", "seeds_to_resolve"):
        if column in frame:
            return pd.to_numeric(frame[column], errors="coerce")
    return pd.Series(math.nan, index=frame.index)


def _listed(rows: pd.DataFrame, text: Callable[[pd.Series], str]) -> list[str]:
    """One nested bullet per claim: '  - HiLo: update speedup >= 2.2x vs full sync — hilo_distill 10 Mbit/s, r=64,
    vs full_sync bf16: 2.50× [2.31×, 2.69×], n=5; ...' (at most CLAIMS claims, SHOWN settings each)."""
    out = []
    groups = list(rows.groupby(["method", "claim"], sort=False))
    for (method, claim), g in groups[:CLAIMS]:
        places = [f"{setting(c)}: {_estimate(text, c)}" for _, c in g.head(SHOWN).iterrows()]
        more = f"; and {len(g) - SHOWN} more settings" if len(g) > SHOWN else ""
        out.append(f"  - {method}: {claim} — {'; '.join(places)}{more}")
    if len(groups) > CLAIMS:
        out.append(f"  - and {len(groups) - CLAIMS} more claims (the tables below)")
    return out


def headline(claims: pd.DataFrame, text: Callable[[pd.Series], str]) -> list[str]:
    """summary.md's opening section (markdown lines); ``text`` renders one claim's estimate."""
    out = ["## In short", ""]
    if claims is None or claims.empty:
        return out + ["No run in these results measures a headline claim; the tables below describe the runs.", ""]
    verdict = claims["verdict"].astype(str)
    held, failed, open_ = claims[verdict == "met"], claims[verdict == "not met"], claims[verdict == "inconclusive"]
    models = sorted({str(m) for m in claims.get("model", pd.Series(dtype=str)).dropna() if str(m)})
    out += [f"{len(claims)} claim checks: {len(held)} held, {len(failed)} did not, {len(open_)} undecided"
            + (f" (model{'s' if len(models) > 1 else ''}: {', '.join(models)})." if models else "."), ""]
    out += [f"- **Held** ({len(held)}){':' if len(held) else '.'}", *_listed(held, text)]
    out += [f"- **Did not hold** ({len(failed)}){':' if len(failed) else '.'}", *_listed(failed, text)]
    line = f"- **Undecided** ({len(open_)})"
    unjudged = len(claims.attrs.get("unjudged_lines", []))
    single = int(sum(seeds_of(c) < 2 for _, c in open_.iterrows()))
    if single:                           # an older table judged such lines (as inconclusive)
        line += f", {single} of them on fewer than two seeds (no interval: run >= 3 seeds)"
    if unjudged:
        line += f"; {unjudged} more lines were not judged (fewer than 2 seeds with a measured value: listed under the claims)"
    needed = _seeds_needed(open_)
    near = open_.assign(_needed=needed)[needed.notna() & (needed != math.inf)].sort_values("_needed", kind="stable")
    out.append(line + ("; nearest to a verdict:" if len(near) else "."))
    for _, c in near.head(NEAREST).iterrows():
        way = f" (toward {c['resolves']})" if isinstance(c.get("resolves"), str) and c.get("resolves") else ""
        out.append(f"  - {c['method']}: {c['claim']} — {setting(c)}: {_estimate(text, c)}; about "
                   f"{int(c['_needed'])} seeds would decide it{way}")
    return out + [""]
