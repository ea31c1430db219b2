"""How the two methods' headline claims fared on these results (measured, never assumed).

HiLo (per on-policy scenario and backend that is not a rate x rank sweep; HiLo + Spar at
the scenario's training rank and its slowest link; bytes and speedup are only judged
against a bf16 full sync, the claim's baseline, and are "not measured" otherwise):
- bytes per update <= 1.6% of full sync,
- end-to-end update speedup >= 2.2x vs full sync at that link,
- quality within 2% (relative) of full sync: ``quality_retained >= 0.98``.

SPRA-LoRA (per federated scenario and backend; the ``spra`` configuration whose variant
is named ``spra``, else the first with the linear rate rule):
- uplink bytes <= 50% of FedIT (exact for square target modules; the model's real ratio is shown),
- client compute <= 50% of FedIT,
- final accuracy above every non-SPRA method of the scenario,
- rank-aware learning rates (linear) beat the constant-rate ablation (when it was run).

A claim is ``met`` when the measured value satisfies the target as stated (no tolerance);
the measured value is always shown so a reader can judge near misses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from harness.report.tables import Tables

HILO_BYTES, HILO_SPEEDUP, HILO_RETAINED = 0.016, 2.2, 0.98
SPRA_UPLINK, SPRA_COMPUTE = 0.5, 0.5


@dataclass(frozen=True)
class Claim:
    method: str          # HiLo | SPRA-LoRA
    claim: str
    where: str           # scenario, backend, link
    measured: str
    met: bool | None     # None: could not be measured


def _check(value: float, ok: bool) -> bool | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else bool(ok)


def hilo_claims(hilo: pd.DataFrame) -> list[Claim]:
    out = []
    if hilo.empty:
        return out
    for (scenario, backend), t in hilo.groupby(["scenario", "backend"], sort=True):
        if t["rate_mbit"].nunique() > 1 and t["ref_rank"].nunique() > 1:
            continue   # a sweep: its grid is its own table
        spar = t[(t["method"] == "hilo") & (t["compressor"] == "spar") & (t["rank"] == t["ref_rank"])]
        if spar.empty:
            continue
        r = spar.sort_values(["rate_mbit", "budget_frac"]).iloc[0]
        dtype = str(r.get("baseline_dtype") or "")
        where = (f"{scenario} [{backend}] {r['rate_mbit']:g} Mbit/s, r={int(r['rank'])}, "
                 f"vs {r['baseline_variant']}{' ' + dtype if dtype else ''}")
        fair = dtype in ("", "bf16")   # the claims are against the bf16 adapter; fp32 would flatter HiLo
        note = "" if fair else f" (vs {dtype} full sync: not the claim's bf16 baseline)"
        b, s, q = r["bytes_frac"], r["speedup"], r["quality_retained"]
        out += [Claim("HiLo", "bytes per update <= 1.6% of full sync", where, f"{100 * b:.4f}%{note}",
                      _check(b, b <= HILO_BYTES) if fair else None),
                Claim("HiLo", "update speedup >= 2.2x vs full sync", where, f"{s:.2f}x{note}",
                      _check(s, s >= HILO_SPEEDUP) if fair else None),
                Claim("HiLo", "quality within 2% of full sync", where, f"{100 * q:.1f}% retained",
                      _check(q, q >= HILO_RETAINED))]
    return out


def spra_claims(spra: pd.DataFrame) -> list[Claim]:
    out = []
    if spra.empty:
        return out
    for (scenario, backend), t in spra.groupby(["scenario", "backend"], sort=True):
        cands = t[t["method"] == "spra"]
        if cands.empty:
            continue
        named = cands[cands["variant"] == "spra"]
        linear = cands[cands["lr_rule"].astype(str).isin(["linear", ""])]
        r = (named if len(named) else linear if len(linear) else cands).iloc[0]
        where = f"{scenario} [{backend}] ranks {r['ranks']}"
        up, comp = r["uplink_frac_vs_fedit"], r["compute_frac_vs_fedit"]
        out += [Claim("SPRA-LoRA", "uplink <= 50% of FedIT", where, f"{100 * up:.1f}%", _check(up, up <= SPRA_UPLINK)),
                Claim("SPRA-LoRA", "client compute <= 50% of FedIT", where, f"{100 * comp:.1f}%",
                      _check(comp, comp <= SPRA_COMPUTE))]
        others = t[t["method"] != "spra"]
        if len(others):
            best = others.sort_values("accuracy").iloc[-1]
            out.append(Claim("SPRA-LoRA", "higher final accuracy than every baseline", where,
                             f"{100 * r['accuracy']:.1f}% vs {best['method']} {100 * best['accuracy']:.1f}%",
                             _check(r["accuracy"], r["accuracy"] > others["accuracy"].max())))
        const = cands[cands["lr_rule"] == "const"]
        if pd.notna(r["resample_every"]):   # the ablation changes the rate rule only
            const = const[const["resample_every"].isna() | (const["resample_every"] == r["resample_every"])]
        if len(const) and r["lr_rule"] in ("linear", ""):
            c = const.iloc[0]
            out.append(Claim("SPRA-LoRA", "rank-aware (linear) lr beats constant lr", where,
                             f"{100 * r['accuracy']:.1f}% vs {100 * c['accuracy']:.1f}%",
                             _check(r["accuracy"], r["accuracy"] > c["accuracy"])))
    return out


def claims(tables: Tables) -> list[Claim]:
    """Every claim the results allow checking, HiLo first."""
    return hilo_claims(tables.hilo) + spra_claims(tables.spra)


def verdict(met) -> str:
    """'met', 'not met' or 'not measured' (None or NaN, as a frame round-trip may turn it)."""
    if met is None or (isinstance(met, float) and math.isnan(met)):
        return "not measured"
    return "met" if bool(met) else "not met"


def as_frame(found: list[Claim]) -> pd.DataFrame:
    """Claims as a table: method, claim, where, measured, met (True / False / None)."""
    return pd.DataFrame([c.__dict__ for c in found], columns=["method", "claim", "where", "measured", "met"])


def claims_frame(tables: Tables) -> pd.DataFrame:
    return as_frame(claims(tables))
