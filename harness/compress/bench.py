"""Compressors compared at equal bytes on real LoRA gradients: the README's compressor table.

    python -m harness.compress.bench            # markdown table (a few minutes on one CPU thread)
    python -m harness.compress.bench --json     # the same rows as JSON
    python -m harness.compress.bench --model wide,small --csv results/tables/compress_wide.csv

Gradients (``--model bench``, the default): a LlamaForCausalLM built from a LlamaConfig (hidden
256, 4 layers, 4 heads, MLP 512, vocab 64; random init, seed 0) with peft LoRA r=64 (alpha 64) on
q,k,v,o,gate,up,down (56 adapter matrices, 1.11 M parameters, 2.23 MB in bf16), next-token loss
on batches of 8 x 32 tokens from a seeded random bigram chain. AdamW (lr 2e-3) takes `warmup`
steps first so that B != 0 and both A- and B-gradients are non-trivial; then `steps`
consecutive gradients are recorded (the optimizer keeps stepping on the true gradient).
``--model tiny|small|wide`` uses the sizes of that model preset (conf/model/*.yaml: hidden,
MLP, layers, heads, kv heads, rank) with the same vocabulary (64), data and procedure; ``wide``
(hidden 1024, GQA 16/4, MLP 2816, r=64) has LLM proportions, where PowerSGD rank 1 fits the
1.6% budget.

Variant names say what ran: ``powersgd`` becomes ``powersgd[subset]`` in a row where the budget
is below rank 1 on every matrix, so it shipped rank 1 on a rotating subset of matrices instead
of running as PowerSGD; ``powersgd-r1`` is PowerSGD at its native rank-1 cost (no budget: its
bytes are whatever rank 1 everywhere costs, which may exceed the row's budget; see ``bytes``).

Metrics per compressor and budget (a fraction of the adapter's bf16 bytes; header included):
  err_1:   mean over steps of ||g_t - C(g_t)|| / ||g_t||, no error feedback
  err_ef:  ||sum_t g_t - sum_t g^_t|| / ||sum_t g_t|| with error feedback over all steps, i.e.
           ||e_T|| / ||sum g||: how far what was shipped drifts from what was computed
  enc/dec: throughput in MB/s of fp32 gradient (median over steps, no error feedback)
  bytes:   mean payload bytes (header included), and the budget in bytes
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import torch

from harness.compress import CompressorError, Payload, build
from harness.compress.spar import spectra
from harness.progress import frames

BUDGETS = (0.005, 0.016, 0.05)
VARIANTS: dict[str, dict] = {     # label -> build options (budget added per row)
    "spar": {"name": "spar"},
    "spar-int8": {"name": "spar", "dtype": "int8"},
    "powersgd": {"name": "powersgd"},
    "powersgd-r1": {"name": "powersgd", "rank": 1, "native": True},
    "topk": {"name": "topk"},
    "randk": {"name": "randk"},
    "quant": {"name": "quant", "dtype": "fp32"},
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def model_config(model: str = "bench", vocab: int = 64, seq: int = 32, hidden: int = 256, layers: int = 4):
    """(LlamaConfig, LoRA rank) of ``--model``: the bench's own model, or a model preset's sizes."""
    from transformers import LlamaConfig

    if model == "bench":
        return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                           max_position_embeddings=seq), None
    from pathlib import Path

    import yaml

    from harness.tasks.models import llama_config

    path = Path(__file__).resolve().parent.parent / "conf" / "model" / f"{model}.yaml"
    if not path.is_file() or model == "hf":
        raise CompressorError(f"--model: {model!r} is not allowed; choose bench or a model preset "
                              f"({', '.join(p.stem for p in sorted(path.parent.glob('*.yaml')) if p.stem != 'hf')})")
    cfg = yaml.safe_load(path.read_text())
    return llama_config({**cfg, "max_positions": seq, "vocab_size": vocab}, vocab), int(cfg["rank"])


def lora_gradients(steps: int = 50, warmup: int = 5, seed: int = 0, rank: int = 64, hidden: int = 256,
                   layers: int = 4, vocab: int = 64, batch: int = 8, seq: int = 32,
                   progress: bool = False, model: str = "bench") -> list[dict[str, torch.Tensor]]:
    """`steps` consecutive LoRA gradients (name -> fp32 tensor) of a small Llama (or of the
    ``model`` preset's sizes, at its rank); see module doc."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM
    from tqdm import tqdm

    torch.manual_seed(seed)
    config, preset_rank = model_config(model, vocab, seq, hidden, layers)
    rank = preset_rank or rank
    net = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0,
                                                              target_modules=TARGETS))
    params = {n: p for n, p in net.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW(params.values(), lr=2e-3)
    g = torch.Generator().manual_seed(seed)
    chain = torch.distributions.Dirichlet(torch.full((vocab,), 0.1)).sample((vocab,))  # bigram rows
    out = []
    for step in tqdm(range(warmup + steps), desc="LoRA gradients", disable=not frames(progress), leave=False):
        tokens = [torch.randint(0, vocab, (batch,), generator=g)]
        for _ in range(seq - 1):
            tokens.append(torch.multinomial(chain[tokens[-1]], 1, generator=g).squeeze(1))
        ids = torch.stack(tokens, dim=1)
        opt.zero_grad()
        net(input_ids=ids, labels=ids).loss.backward()
        if step >= warmup:
            out.append({n: p.grad.detach().clone() for n, p in params.items()})
        opt.step()
    return out


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


def _norm(tensors: dict[str, torch.Tensor]) -> float:
    return float(sum(t.double().square().sum() for t in tensors.values())) ** 0.5


def _diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {n: a[n] - b[n] for n in a}


def evaluate(label: str, budget: float, grads: list[dict[str, torch.Tensor]], seed: int = 0,
             options: dict | None = None) -> Row:
    """Run one compressor at one budget over `grads` (see module doc for the metrics); ``options``:
    its build options in place of ``VARIANTS[label]`` (a variant outside the table, e.g. encode_ab's)."""
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
            fed.encode(g, step)
            total = {n: total[n] + g[n] for n in total}
        err_ef = _norm(fed.residual) / _norm(total)
    except CompressorError as err:
        nan = float("nan")
        return Row(label, budget, int(budget * 2 * numel), nan, 0, nan, nan, nan, nan, note=str(err),
                   adapter_bytes=2 * numel)
    note = ""
    if subset:
        label, note = f"{label}[subset]", "below rank 1 on every matrix: rank 1 on a rotating subset"
    if native:
        note = f"native rank-1 cost ({statistics.fmean(sizes) / (2 * numel):.2%} of bf16), budget not applied"
    return Row(label, budget, int(budget * 2 * numel) if native else payload.info["budget_bytes"],
               statistics.fmean(sizes), payload.header_nbytes, statistics.fmean(errors), err_ef,
               mb / statistics.median(enc), mb / statistics.median(dec), note=note, adapter_bytes=2 * numel)


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


def write_csv(rows: list[Row], path: str) -> None:
    """The rows as a tidy CSV (one row per model, compressor and budget), written atomically."""
    import csv
    import os
    from dataclasses import fields

    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[x.name for x in fields(Row)])
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.compress.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="gradients (steps) per run (default 50)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)),
                        help="fractions of the bf16 adapter bytes, comma-separated")
    parser.add_argument("--compressors", default=",".join(VARIANTS), help=f"subset of {', '.join(VARIANTS)}")
    parser.add_argument("--model", default="bench",
                        help="comma-separated: bench (default) and/or model presets (tiny, small, wide)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a shared machine, more threads than free cores make "
                             "OpenMP timings swing 100x)")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of markdown")
    parser.add_argument("--csv", help="also write the rows to this CSV (e.g. results/tables/compress_wide.csv)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from tqdm import tqdm

    labels = args.compressors.split(",")
    unknown = [c for c in labels if c not in VARIANTS]
    if unknown:
        print(f"--compressors: {unknown[0]!r} is not allowed; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    budgets = [float(b) for b in args.budgets.split(",")]
    models = args.model.split(",")
    try:
        for m in models:
            model_config(m)
    except CompressorError as err:
        print(str(err), file=sys.stderr)
        return 2
    all_rows, reports = [], []
    for m in models:
        grads = lora_gradients(steps=args.steps, progress=True, model=m)
        dense = 2 * sum(t.numel() for t in grads[0].values())
        ident = build("identity")
        ident_err = statistics.fmean(_norm(_diff(g, ident.decode(ident.encode(g)))) / _norm(g) for g in grads)
        rows = [evaluate(c, b, grads) for c, b in tqdm([(c, b) for b in budgets for c in labels],
                                                       desc=f"compressors ({m})", disable=not frames())]
        for r in rows:
            r.model = m
        spectra_ms = time_spectra(grads[0])
        all_rows += rows
        reports.append({"model": m, "dense_bf16_bytes": dense, "steps": len(grads), "identity_bf16_err": ident_err,
                        "matrices": len(grads[0]), "spectra_ms": spectra_ms, "rows": [asdict(r) for r in rows]})
        if not args.json:
            print(f"## {m}\n\n" + markdown(rows, dense, spectra_ms, len(grads[0])))
            print(f"\nidentity bf16: {dense} B, err {ident_err:.5f}; {len(grads)} steps; "
                  f"torch {torch.__version__}, {torch.get_num_threads()} threads\n", flush=True)
    if args.csv:
        write_csv(all_rows, args.csv)
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
