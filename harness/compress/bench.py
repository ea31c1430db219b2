"""Compressors compared at equal bytes on real LoRA gradients: the README's compressor table.

    python -m harness.compress.bench            # markdown table (a few minutes on one CPU thread)
    python -m harness.compress.bench --json     # the same rows as JSON

Gradients: a LlamaForCausalLM built from a LlamaConfig (hidden 256, 4 layers, 4 heads, MLP 512,
vocab 64; random init, seed 0) with peft LoRA r=64 (alpha 64) on q,k,v,o,gate,up,down (56
adapter matrices, 1.11 M parameters, 2.23 MB in bf16), next-token loss on batches of 8 x 32
tokens from a seeded random bigram chain. AdamW (lr 2e-3) takes `warmup` steps first so that
B != 0 and both A- and B-gradients are non-trivial; then `steps` consecutive gradients are
recorded (the optimizer keeps stepping on the true gradient).

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
    "topk": {"name": "topk"},
    "randk": {"name": "randk"},
    "quant": {"name": "quant", "dtype": "fp32"},
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_gradients(steps: int = 50, warmup: int = 5, seed: int = 0, rank: int = 64, hidden: int = 256,
                   layers: int = 4, vocab: int = 64, batch: int = 8, seq: int = 32,
                   progress: bool = False) -> list[dict[str, torch.Tensor]]:
    """`steps` consecutive LoRA gradients (name -> fp32 tensor) of a small Llama; see module doc."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    from tqdm import tqdm

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=seq)
    model = get_peft_model(LlamaForCausalLM(config), LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0,
                                                                target_modules=TARGETS))
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
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
        model(input_ids=ids, labels=ids).loss.backward()
        if step >= warmup:
            out.append({n: p.grad.detach().clone() for n, p in params.items()})
        opt.step()
    return out


@dataclass
class Row:
    compressor: str
    budget: float
    budget_bytes: int
    bytes: float
    header_bytes: int
    err_1: float
    err_ef: float
    enc_mbs: float
    dec_mbs: float
    note: str = ""


def _norm(tensors: dict[str, torch.Tensor]) -> float:
    return float(sum(t.double().square().sum() for t in tensors.values())) ** 0.5


def _diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {n: a[n] - b[n] for n in a}


def evaluate(label: str, budget: float, grads: list[dict[str, torch.Tensor]], seed: int = 0) -> Row:
    """Run one compressor at one budget over `grads` (see module doc for the metrics)."""
    opts = dict(VARIANTS[label])
    name = opts.pop("name")
    numel = sum(t.numel() for t in grads[0].values())
    mb = 4 * numel / 1e6
    try:
        plain = build(name, budget=budget, seed=seed, **opts)
        fed = build(name, budget=budget, seed=seed, error_feedback=True, **opts)
        errors, enc, dec, sizes = [], [], [], []
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
        total = {n: torch.zeros_like(t) for n, t in grads[0].items()}
        for step, g in enumerate(grads):
            fed.encode(g, step)
            total = {n: total[n] + g[n] for n in total}
        err_ef = _norm(fed.residual) / _norm(total)
    except CompressorError as err:
        nan = float("nan")
        return Row(label, budget, int(budget * 2 * numel), nan, 0, nan, nan, nan, nan, note=str(err))
    return Row(label, budget, payload.info["budget_bytes"], statistics.fmean(sizes), payload.header_nbytes,
               statistics.fmean(errors), err_ef, mb / statistics.median(enc), mb / statistics.median(dec))


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


def markdown(rows: list[Row], dense_bytes: int, spectra_ms: dict[str, float]) -> str:
    lines = [f"Adapter gradient: {dense_bytes / 1e6:.2f} MB in bf16 (identity bf16: err_1 = err_ef = "
             "bf16 rounding). err_1: single step, no error feedback, mean over steps; err_ef: "
             "||sum g - sum g^|| / ||sum g|| with error feedback.", "",
             "| compressor | budget | budget B | used B | header B | err_1 | err_ef | enc MB/s | dec MB/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.note:
            lines.append(f"| {r.compressor} | {r.budget:.1%} | {r.budget_bytes} | n/a | | | | | |")
            continue
        lines.append(f"| {r.compressor} | {r.budget:.1%} | {r.budget_bytes} | {r.bytes:.0f} | {r.header_bytes} | "
                     f"{r.err_1:.3f} | {r.err_ef:.3f} | {r.enc_mbs:.0f} | {r.dec_mbs:.0f} |")
    for r in rows:
        if r.note:
            lines.append(f"\n{r.compressor} at {r.budget:.1%}: n/a, {r.note}")
    lines += ["", f"Spectra of all 56 matrices per step: gram+eigh {spectra_ms['gram']:.1f} ms, "
                  f"torch.linalg.svd {spectra_ms['svd']:.1f} ms."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.compress.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="gradients (steps) per run (default 50)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)),
                        help="fractions of the bf16 adapter bytes, comma-separated")
    parser.add_argument("--compressors", default=",".join(VARIANTS), help=f"subset of {', '.join(VARIANTS)}")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a shared machine, more threads than free cores make "
                             "OpenMP timings swing 100x)")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of markdown")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from tqdm import tqdm

    labels = args.compressors.split(",")
    unknown = [c for c in labels if c not in VARIANTS]
    if unknown:
        print(f"--compressors: {unknown[0]!r} is not allowed; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    budgets = [float(b) for b in args.budgets.split(",")]
    grads = lora_gradients(steps=args.steps, progress=True)
    dense = 2 * sum(t.numel() for t in grads[0].values())
    ident = build("identity")
    ident_err = statistics.fmean(_norm(_diff(g, ident.decode(ident.encode(g)))) / _norm(g) for g in grads)
    rows = [evaluate(c, b, grads) for c, b in tqdm([(c, b) for b in budgets for c in labels], desc="compressors", disable=not frames())]
    spectra_ms = time_spectra(grads[0])
    if args.json:
        print(json.dumps({"dense_bf16_bytes": dense, "steps": len(grads), "identity_bf16_err": ident_err,
                          "spectra_ms": spectra_ms, "rows": [asdict(r) for r in rows]}, indent=1))
    else:
        print(markdown(rows, dense, spectra_ms))
        print(f"\nidentity bf16: {dense} B, err {ident_err:.5f}; {len(grads)} steps; "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
