"""One figure style for every plot: serif, sized for a two-column paper, PNG and PDF.

``STYLE`` is the whole rc dict. Figures are ``SINGLE`` column wide (3.4 in) or ``DOUBLE``
(7.0 in) and are drawn at their final size, so 8 pt text stays 8 pt in print. Colours are
the Okabe-Ito palette (colour-blind safe) with a fixed colour per method family, so a
method looks the same in every figure; variants of one family differ by line style and marker.
"""
from __future__ import annotations

import contextlib
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
FAMILY_COLOURS = {   # Okabe-Ito
    "full_sync": "#000000", "lowrank": "#56B4E9", "delta": "#009E73", "hilo": "#D55E00",
    "hilo+spar": "#D55E00", "hilo+powersgd": "#0072B2", "hilo+topk": "#E69F00", "hilo+randk": "#CC79A7",
    "hilo+quant": "#999999", "hilo+identity": "#7F3C00", "patch": "#F0E442",
    "fedit": "#000000", "ffa": "#0072B2", "spra": "#D55E00", "flora": "#009E73",
    "hetlora": "#E69F00", "flexlora": "#CC79A7",
}
FAMILY_MARKERS = {
    "full_sync": "o", "lowrank": "s", "delta": "^", "hilo": "D", "hilo+spar": "D", "hilo+powersgd": "v",
    "hilo+topk": "P", "hilo+randk": "X", "hilo+quant": "h", "hilo+identity": "*", "patch": "<",
    "fedit": "o", "ffa": "s", "spra": "D", "flora": "^", "hetlora": "v", "flexlora": "P",
}
SPARE_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#999999"]
SPARE_MARKERS = ["<", ">", "p", "8", "H", "d"]
LINESTYLES = ["-", "--", ":", "-."]
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


def series_styles(keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """Line kwargs per (family, series name): the family's colour and marker, a line style per member."""
    styles: dict[tuple[str, str], dict] = {}
    members: dict[str, int] = {}
    spare_c, spare_m = iter(SPARE_COLOURS * 4), iter(SPARE_MARKERS * 4)
    extra: dict[str, tuple[str, str]] = {}
    for fam, name in dict.fromkeys(keys):
        n = members[fam] = members.get(fam, -1) + 1
        if fam in FAMILY_COLOURS:
            colour, marker = FAMILY_COLOURS[fam], FAMILY_MARKERS.get(fam, "o")
        else:
            colour, marker = extra.setdefault(fam, (next(spare_c), next(spare_m)))
        styles[(fam, name)] = {"color": colour, "marker": marker, "linestyle": LINESTYLES[n % len(LINESTYLES)]}
    return styles


@contextlib.contextmanager
def styled() -> Iterator[None]:
    """Every figure of the report is made inside this context."""
    with matplotlib.rc_context(STYLE):
        yield


def figure(panels: int = 1, height: float = HEIGHT, sharey: bool = True):
    """A figure of ``panels`` axes in a row: one column wide for 1 panel, two columns otherwise."""
    width = SINGLE if panels == 1 else DOUBLE
    fig, axes = plt.subplots(1, panels, figsize=(width, height), sharey=sharey, squeeze=False,
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
