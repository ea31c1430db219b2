"""The compressor table: each variant at each budget over one gradient stream (harness.commands.compress_bench).

Variant names say what ran: ``powersgd`` becomes ``powersgd[subset]`` in a row where the budget
is below rank 1 on every matrix, so it shipped rank 1 on a rotating subset of matrices instead
of running as PowerSGD; ``powersgd-r1`` is PowerSGD at its native rank-1 cost (no budget: its
bytes are whatever rank 1 everywhere costs, which may exceed the row's budget; see ``bytes``);
``powersgd-k1|k2|k4`` is PowerSGD as itself at a fixed rank 1, 2 or 4 inside the budget (n/a in a
row whose budget cannot hold that rank on every matrix; ``powersgd`` then runs its subset mode).

Metrics per compressor and budget (a fraction of the adapter's bf16 bytes; header included):
  err_1:   mean over steps of ||g_t - C(g_t)|| / ||g_t||, no error feedback
  err_ef:  ||sum_t g_t - sum_t g^_t|| / ||sum_t g_t|| with error feedback over all steps, i.e.
           ||e_T|| / ||sum g||: how far what was shipped drifts from what was computed
  enc/dec: throughput in MB/s of fp32 gradient (median over steps, no error feedback)
  bytes:   mean payload bytes (header included), and the budget in bytes
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

from harness.compress import CompressorError, Payload, build
from harness.compress.spar import spectra

BUDGETS = (0.005, 0.016, 0.05)
VARIANTS: dict[str, dict] = {     # label -> build options (budget added per row)
    "spar": {"name": "spar"},
    "spar-int8": {"name": "spar", "dtype": "int8"},
    "powersgd": {"name": "powersgd"},
    "powersgd-r1": {"name": "powersgd", "rank": 1, "native": True},
    "powersgd-k1": {"name": "powersgd", "rank": 1},
    "powersgd-k2": {"name": "powersgd", "rank": 2},
    "powersgd-k4": {"name": "powersgd", "rank": 4},
    "topk": {"name": "topk"},
    "randk": {"name": "randk"},
    "quant": {"name": "quant", "dtype": "fp32"},
    "demo": {"name": "demo"},           # DeMo's DCT top-k per 64 x 64 chunk, k fitted to the budget
}
PRESET_VARIANTS = ("spar", "spar-int8", "powersgd", "powersgd-r1", "topk", "randk", "quant", "demo")   # --model presets
REAL_VARIANTS = ("spar", "powersgd", "powersgd-k1", "powersgd-k2", "powersgd-k4", "topk", "randk", "quant", "demo")


@dataclass
class Row:
    compressor: str                 # the variant as it ran (e.g. powersgd[subset]: module doc)
    budget: float
    budget_bytes: int
    bytes: float
    header_bytes: int
    err_1: float
    err_ef: float
    enc_mbs: float
    dec_mbs: float
    note: str = ""
    model: str = "bench"
    adapter_bytes: int = 0          # bf16 bytes of the whole adapter gradient
    lora_rank: int = 0              # the adapter's LoRA rank r
    steps: int = 0                  # gradients the row's metrics average over
    seed: int = 0                   # the gradient stream's seed (a real model's LoRA draw and batches)


def _norm(tensors: dict[str, torch.Tensor]) -> float:
    return float(sum(t.double().square().sum() for t in tensors.values())) ** 0.5


def _diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {n: a[n] - b[n] for n in a}


def evaluate(label: str, budget: float, grads: list[dict[str, torch.Tensor]], seed: int = 0,
             options: dict | None = None, ranks: list[dict[str, int]] | None = None) -> Row:
    """Run one compressor at one budget over `grads` (see module doc for the metrics); ``options``:
    its build options in place of ``VARIANTS[label]`` (a variant outside the table, e.g. encode_ab's);
    ``ranks``: a list that receives the error-feedback encoder's ``{matrix: rank}`` per step (Spar
    and PowerSGD record them in ``payload.info``)."""
    opts = dict(VARIANTS[label] if options is None else options)
    name = opts.pop("name")
    native = opts.pop("native", False)
    numel = sum(t.numel() for t in grads[0].values())
    mb = 4 * numel / 1e6
    sized = {} if native else {"budget": budget}
    try:
        plain = build(name, seed=seed, **sized, **opts)
        fed = build(name, seed=seed, error_feedback=True, **sized, **opts)
        errors, enc, dec, sizes, subset = [], [], [], [], False
        for step, g in enumerate(grads):
            t0 = time.perf_counter()
            payload = plain.encode(g, step)
            t1 = time.perf_counter()
            decoded = plain.decode(Payload.from_bytes(payload.to_bytes()))
            t2 = time.perf_counter()
            enc.append(t1 - t0)
            dec.append(t2 - t1)
            sizes.append(payload.nbytes)
            errors.append(_norm(_diff(g, decoded)) / _norm(g))
            subset |= name == "powersgd" and 0 in payload.info.get("ranks", {}).values()
        total = {n: torch.zeros_like(t) for n, t in grads[0].items()}
        for step, g in enumerate(grads):
            shipped = fed.encode(g, step)
            if ranks is not None:
                ranks.append(dict(shipped.info.get("ranks", {})))
            total = {n: total[n] + g[n] for n in total}
        err_ef = _norm(fed.residual) / _norm(total)
    except CompressorError as err:
        nan = float("nan")
        return Row(label, budget, int(budget * 2 * numel), nan, 0, nan, nan, nan, nan, note=str(err),
                   adapter_bytes=2 * numel, steps=len(grads))
    note = ""
    if subset:
        label, note = f"{label}[subset]", "below rank 1 on every matrix: rank 1 on a rotating subset"
    if native:
        note = f"native rank-1 cost ({statistics.fmean(sizes) / (2 * numel):.2%} of bf16), budget not applied"
    return Row(label, budget, int(budget * 2 * numel) if native else payload.info["budget_bytes"],
               statistics.fmean(sizes), payload.header_nbytes, statistics.fmean(errors), err_ef,
               mb / statistics.median(enc), mb / statistics.median(dec), note=note, adapter_bytes=2 * numel,
               steps=len(grads))


def time_spectra(grads: dict[str, torch.Tensor], repeats: int = 5) -> dict[str, float]:
    """Milliseconds to get the spectra of every matrix of one gradient: gram vs svd."""
    by_shape: dict[tuple, list] = {}
    for t in grads.values():
        by_shape.setdefault(tuple(t.shape), []).append(t)
    batches = [torch.stack(ts) for ts in by_shape.values()]
    result = {}
    for method in ("gram", "svd"):
        spectra(batches[0], method)
        t0 = time.perf_counter()
        for _ in range(repeats):
            for b in batches:
                spectra(b, method)
        result[method] = (time.perf_counter() - t0) / repeats * 1e3
    return result


def _failed(r: Row) -> bool:
    return r.bytes != r.bytes            # NaN: the compressor could not honour the budget


def markdown(rows: list[Row], dense_bytes: int, spectra_ms: dict[str, float], matrices: int = 56) -> str:
    lines = [f"Adapter gradient: {dense_bytes / 1e6:.2f} MB in bf16 (identity bf16: err_1 = err_ef = "
             "bf16 rounding). err_1: single step, no error feedback, mean over steps; err_ef: "
             "||sum g - sum g^|| / ||sum g|| with error feedback.", "",
             "| compressor | budget | budget B | used B | header B | err_1 | err_ef | enc MB/s | dec MB/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if _failed(r):
            lines.append(f"| {r.compressor} | {r.budget:.1%} | {r.budget_bytes} | n/a | | | | | |")
            continue
        lines.append(f"| {r.compressor} | {r.budget:.1%} | {r.budget_bytes} | {r.bytes:.0f} | {r.header_bytes} | "
                     f"{r.err_1:.3f} | {r.err_ef:.3f} | {r.enc_mbs:.0f} | {r.dec_mbs:.0f} |")
    for r in rows:
        if r.note:
            lines.append(f"\n{r.compressor} at {r.budget:.1%}: {'n/a, ' if _failed(r) else ''}{r.note}")
    lines += ["", f"Spectra of all {matrices} matrices per step: gram+eigh {spectra_ms['gram']:.1f} ms, "
                  f"torch.linalg.svd {spectra_ms['svd']:.1f} ms."]
    return "\n".join(lines)


def write_csv(rows: list, path: str) -> None:
    """The rows as a tidy CSV (one row per model, compressor and budget), written atomically."""
    import csv
    import os
    from dataclasses import fields

    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[x.name for x in fields(type(rows[0]) if rows else Row)])
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    os.replace(tmp, path)
