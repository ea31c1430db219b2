"""One figure style for every plot: serif, sized for a two-column paper, PNG and PDF.

``STYLE`` is the whole rc dict. Figures are ``SINGLE`` column wide (3.4 in) or ``DOUBLE``
(7.0 in) and are drawn at their final size, so 8 pt text stays 8 pt in print. Colours are
the Okabe-Ito palette (colour-blind safe) with a fixed colour per method (``METHOD_COLOURS``:
HiLo + Spar and HiLo + PowerSGD are two methods), so a method looks the same in every figure;
variants of one method differ by marker and line style (``series_styles``).

This module is the one mapping from results to words and looks that every figure uses:
colours and markers per method, legend text from a configuration's attributes
(``series_label``: "HiLo + Spar, 1.6% budget, overlap mode", never a variant key) and link
names (``link_text``: "10 Mbit/s", "LTE-like trace, mean 4.8 Mbit/s").
"""
from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path
from typing import Iterator

import matplotlib

matplotlib.use("Agg")   # files only; the report never opens a window
import matplotlib.pyplot as plt  # noqa: E402

SINGLE, DOUBLE, HEIGHT = 3.4, 7.0, 2.3   # inches
STYLE = {
    "font.family": "serif",
    "font.serif": ["STIXGeneral", "Times New Roman", "DejaVu Serif"],
    "mathtext.fontset": "stix",
    "font.size": 8, "axes.labelsize": 8, "axes.titlesize": 8, "legend.fontsize": 6.5,
    "xtick.labelsize": 7, "ytick.labelsize": 7,
    "lines.linewidth": 1.2, "lines.markersize": 3.5,
    "axes.linewidth": 0.6, "axes.grid": True, "grid.linewidth": 0.4, "grid.alpha": 0.35,
    "axes.spines.top": False, "axes.spines.right": False,
    "xtick.major.width": 0.6, "ytick.major.width": 0.6, "xtick.minor.width": 0.4, "ytick.minor.width": 0.4,
    "legend.frameon": False, "legend.handlelength": 1.8, "legend.borderaxespad": 0.3,
    "figure.dpi": 100, "savefig.dpi": 300,
    "figure.constrained_layout.h_pad": 0.02, "figure.constrained_layout.w_pad": 0.02,
    "pdf.fonttype": 42, "ps.fonttype": 42,   # embed TrueType: editable text, accepted by publishers
}
METHOD_COLOURS = {   # Okabe-Ito; patch in a dark gold (Okabe-Ito's yellow #F0E442 vanishes on white)
    "full_sync": "#000000", "lowrank": "#56B4E9", "delta": "#009E73", "hilo": "#D55E00",
    "hilo+spar": "#D55E00", "hilo+powersgd": "#0072B2", "hilo+topk": "#E69F00", "hilo+randk": "#CC79A7",
    "hilo+quant": "#999999", "hilo+identity": "#7F3C00", "patch": "#A6761D",
    "fedit": "#000000", "ffa": "#0072B2", "spra": "#D55E00", "flora": "#009E73",
    "hetlora": "#E69F00", "flexlora": "#CC79A7",
}
FAMILY_COLOURS = METHOD_COLOURS   # the name older code uses
FAMILY_MARKERS = {
    "full_sync": "o", "lowrank": "s", "delta": "^", "hilo": "D", "hilo+spar": "D", "hilo+powersgd": "v",
    "hilo+topk": "P", "hilo+randk": "X", "hilo+quant": "h", "hilo+identity": "*", "patch": "<",
    "fedit": "o", "ffa": "s", "spra": "D", "flora": "^", "hetlora": "v", "flexlora": "P",
}
SPARE_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#999999"]
SPARE_MARKERS = ["<", ">", "p", "8", "H", "d"]
LINESTYLES = ["-", "--", ":", "-."]
VARIANT_MARKERS = ["o", "s", "^", "v", "D", "P", "X", "h", "<", ">", "p", "*"]   # a method's 2nd, 3rd... variant
PHASE_COLOURS = {"rollout_s": "#4c72b0", "transfer_up_s": "#8172b2", "learn_s": "#55a868", "encode_s": "#dd8452",
                 "transfer_down_s": "#c44e52", "apply_s": "#937860", "ack_s": "#8c8c8c"}   # phases, not methods
PART_COLOURS = {"all": "#4d4d4d", "A": "#0072B2", "B": "#E69F00"}   # LoRA's A and B and the whole adapter
SERIES_COLOURS = ["#D55E00", "#0072B2", "#009E73", "#E69F00", "#CC79A7", "#56B4E9", "#000000", "#999999"]
TRACE_NAMES = {"lte_uplink": "LTE-like trace", "broadband_diurnal": "diurnal broadband trace"}   # netem/tracegen.py
ORDER = ["full_sync", "lowrank", "delta", "patch", "hilo", "fedit", "ffa", "flora", "hetlora", "flexlora", "spra"]
METHOD_ORDER = {m: i for i, m in enumerate(ORDER)}   # baselines first, the method under test last
COMPRESSOR_NAMES = {"spar": "Spar", "powersgd": "PowerSGD", "topk": "top-k", "randk": "random-k",
                    "quant": "int8", "identity": "identity"}
METHOD_NAMES = {"full_sync": "full sync", "lowrank": "low-rank", "delta": "delta", "patch": "patch sync",
                "hilo": "HiLo",
                "spra": "SPRA", "ffa": "FFA-LoRA", "fedit": "FedIT", "flora": "FLoRA",
                "hetlora": "HetLoRA", "flexlora": "FlexLoRA"}


def family(method: str, compressor: str | None = None) -> str:
    """The colour family: the method, or ``hilo+<compressor>`` for HiLo."""
    if method == "hilo" and compressor and compressor != "none":
        return f"hilo+{compressor}"
    return method


def label(method: str, compressor: str | None = None, rank: float | None = None,
          ref_rank: float | None = None) -> str:
    """Legend text: 'full sync', 'HiLo + Spar', 'low-rank (r=8)', 'delta + top-k'."""
    name = METHOD_NAMES.get(method, method)
    if compressor and compressor != "none":
        name += " + " + COMPRESSOR_NAMES.get(compressor, compressor)
    if rank is not None and ref_rank is not None and rank == rank and rank != ref_rank:
        name += f" (r={int(rank)})"
    return name


def _missing(v: object) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or str(v) in ("", "nan", "None")


def rate_text(rate_mbit: float | None, mean: bool = False) -> str:
    """A configured rate as set ('10 Mbit/s', '12.5 Mbit/s'); a measured ``mean`` (a trace's time
    mean, 4.83543) to two significant digits ('4.8 Mbit/s', '44 Mbit/s'); 'unshaped' for none."""
    if _missing(rate_mbit):
        return "unshaped"
    r = float(rate_mbit)
    if mean:
        return f"{r:.2g} Mbit/s" if r < 100 else f"{r:.0f} Mbit/s"
    return f"{float(f'{r:.4g}'):g} Mbit/s"


def trace_text(trace: str) -> str:
    """A trace's name in words: 'LTE-like trace'; several (per link, 'a+b'): 'LTE-like and diurnal broadband traces'."""
    names = [TRACE_NAMES.get(t, f"{t} trace") for t in str(trace).split("+") if t]
    if len(names) == 1:
        return names[0]
    return " and ".join(n.removesuffix(" trace") for n in names) + " traces"


def link_text(rate_mbit: float | None, trace: str | None = None) -> str:
    """A panel title: '10 Mbit/s' on a constant link, 'LTE-like trace, mean 4.8 Mbit/s' on a trace."""
    if _missing(trace):
        return rate_text(rate_mbit)
    return f"{trace_text(str(trace))}, mean {rate_text(rate_mbit, mean=True)}"


def link_order(rate_mbit: float | None, trace: str | None = None) -> tuple:
    """Sort key of panels: slowest link first (a trace by its mean rate; unshaped last)."""
    rate = math.inf if _missing(rate_mbit) else float(rate_mbit)
    return (rate, 0, "") if _missing(trace) else (rate, 1, str(trace))


def budget_text(frac: float | None) -> str:
    """A compressor's byte budget: '1.6% budget', '0.5% budget', '5% budget'; 'no byte budget' when unset."""
    return "no byte budget" if _missing(frac) else f"{100 * float(frac):.2g}% budget"


def series_label(method: str, compressor: str | None = None, *, rank: float | None = None,
                 ref_rank: float | None = None, budget: float | None = None, staleness: float | None = None,
                 show_budget: bool = True, dtype: str | None = None) -> str:
    """Legend text of one configuration, in words: 'HiLo + Spar, 1.6% budget, overlap mode',
    'low-rank, r=1', 'full sync', 'full sync, fp32'. The budget is named for compressed methods
    (``show_budget``), the rank when it differs from the scenario's (``ref_rank``), the wire dtype of
    a sync that is not bf16 (``dtype``, the runs' ``sync_dtype``), the overlap mode when staleness > 0."""
    parts = [label(method, compressor)]
    uncompressed = _missing(compressor) or compressor == "none"
    if uncompressed and not _missing(dtype) and str(dtype) != "bf16":     # a full or low-rank sync in fp32
        parts.append(str(dtype))
    if not _missing(rank) and not _missing(ref_rank) and float(rank) != float(ref_rank):
        parts.append(f"r={int(float(rank))}")
    compressed = compressor is not None and not _missing(compressor) and compressor != "none"
    if show_budget and compressed:
        parts.append(budget_text(budget))
    if not _missing(staleness) and float(staleness) > 0:
        parts.append("overlap mode" + (f" (staleness {int(float(staleness))})" if float(staleness) != 1 else ""))
    return ", ".join(parts)


def series_styles(keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """Line kwargs per (family, series name): the method's colour; its first series the method's
    marker and a solid line, each further series of that method another marker and line style,
    so no two series of one figure share colour, marker and line style."""
    styles: dict[tuple[str, str], dict] = {}
    members: dict[str, int] = {}
    spare_c, spare_m = iter(SPARE_COLOURS * 4), iter(SPARE_MARKERS * 4)
    extra: dict[str, tuple[str, str]] = {}
    for fam, name in dict.fromkeys(keys):
        n = members[fam] = members.get(fam, -1) + 1
        if fam in METHOD_COLOURS:
            colour, marker = METHOD_COLOURS[fam], FAMILY_MARKERS.get(fam, "o")
        else:
            colour, marker = extra.setdefault(fam, (next(spare_c), next(spare_m)))
        if n:
            others = [m for m in VARIANT_MARKERS if m != marker]
            marker = others[(n - 1) % len(others)]
        styles[(fam, name)] = {"color": colour, "marker": marker, "linestyle": LINESTYLES[n % len(LINESTYLES)]}
    return styles


@contextlib.contextmanager
def styled() -> Iterator[None]:
    """Every figure of the report is made inside this context."""
    with matplotlib.rc_context(STYLE):
        yield


def figure(panels: int = 1, height: float = HEIGHT, sharey: bool = True, sharex: bool = True):
    """A figure of ``panels`` axes in a row: one column wide for 1 panel, two columns otherwise.
    Panels share both scales by default, so a reader compares them at a glance."""
    width = SINGLE if panels == 1 else DOUBLE
    fig, axes = plt.subplots(1, panels, figsize=(width, height), sharey=sharey, sharex=sharex, squeeze=False,
                             layout="constrained")
    return fig, list(axes[0])


def slug(*parts: object) -> str:
    """File name from parts: 'quality_vs_bytes-hilo_distill-tc-distill' (parts joined by '-')."""
    kept = [re.sub(r"[^A-Za-z0-9._+]+", "_", str(p)).strip("_") for p in parts if p is not None and str(p) != ""]
    return "-".join(k for k in kept if k)


def save(fig, out_dir: Path, name: str) -> list[Path]:
    """Write ``name.png`` and ``name.pdf`` under ``out_dir``; closes the figure."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png", out_dir / f"{name}.pdf"]
    try:
        for p in paths:
            fig.savefig(p, metadata={"CreationDate": None} if p.suffix == ".pdf" else None)
    finally:
        plt.close(fig)
    return paths
