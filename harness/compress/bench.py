"""Compressors compared at equal bytes on real LoRA gradients: the README's compressor table.

    python -m harness.compress.bench            # markdown table (a few minutes on one CPU thread)
    python -m harness.compress.bench --json     # the same rows as JSON
    python -m harness.compress.bench --model wide,small --csv results/tables/compress_wide.csv
    python -m harness.compress.bench --allocations --model tiny,wide --seeds 0,1,2 \
        --csv results/tables/spar_allocation.csv      # Spar's allocation ablation (below)

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

Allocation ablation (``--allocations``; Spar's ``compressor.options.allocation``, one budget,
default 1.6%): per model, seed and allocation, the stream g_1..g_T is encoded with error
feedback as hilo's learner does, and two Adam optimizers run side by side without parameters:
the reference on g_t, the replica on the decoded g^_t (what hilo's learner and workers step on;
its second moments are what ``preconditioned`` reads, exactly as the learner hands them over).
Each yields the step direction Delta_t = m^_t / (sqrt(v^_t) + eps) (Adam, betas 0.9/0.999,
eps 1e-8; the learning rate is a common factor and left out). Metrics (``AllocationRow``):
  grad_err:  mean_t ||g^_t - g_t|| / ||g_t|| with error feedback (per step)
  grad_err_1 / grad_err_ef: err_1 and err_ef above, for this allocation
  adam_err:  mean_t ||Delta^_t - Delta_t|| / ||Delta_t|| (the update the replicas apply vs the
             uncompressed one, per step)
  adam_err_sum: ||sum_t Delta^_t - sum_t Delta_t|| / ||sum_t Delta_t|| (where T steps at a
             constant lr move the adapter; no feedback of the parameters into the stream: the
             stream is fixed, recorded from training on the true gradient)
  a_share / b_share: fraction of (step, matrix) pairs of lora_A / lora_B matrices with rank > 0
The stream's own optimizer (AdamW 2e-3, on the true gradient) is unrelated to these two.
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


@dataclass
class AllocationRow:
    model: str
    allocation: str
    seed: int
    budget: float
    steps: int
    bytes: float                    # mean payload bytes
    grad_err: float                 # with error feedback, mean over steps
    grad_err_1: float               # without error feedback, mean over steps
    grad_err_ef: float              # ||e_T|| / ||sum g||
    adam_err: float                 # mean_t ||Delta^_t - Delta_t|| / ||Delta_t||
    adam_err_sum: float             # ||sum Delta^ - sum Delta|| / ||sum Delta||
    a_share: float                  # (step, A matrix) pairs with rank > 0
    b_share: float                  # (step, B matrix) pairs with rank > 0


class AdamDirection:
    """Adam's step direction without parameters: per name, m and v; ``step(g)`` returns
    m^_t / (sqrt(v^_t) + eps) after the update (torch.optim.Adam's arithmetic, lr 1, no decay)."""

    def __init__(self, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.steps = 0
        self.m: dict[str, torch.Tensor] = {}
        self.v: dict[str, torch.Tensor] = {}

    def step(self, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self.steps += 1
        c1, c2 = 1 - self.beta1 ** self.steps, 1 - self.beta2 ** self.steps
        out = {}
        for n, g in grads.items():
            g = g.double()
            self.m[n] = self.m.get(n, torch.zeros_like(g)).mul(self.beta1).add_(g, alpha=1 - self.beta1)
            self.v[n] = self.v.get(n, torch.zeros_like(g)).mul(self.beta2).addcmul_(g, g, value=1 - self.beta2)
            out[n] = (self.m[n] / c1) / ((self.v[n] / c2).sqrt() + self.eps)
        return out


def evaluate_allocation(allocation: str, budget: float, grads: list[dict[str, torch.Tensor]], seed: int = 0,
                        model: str = "bench") -> AllocationRow:
    """One allocation of Spar at one budget over ``grads`` (module doc, "Allocation ablation")."""
    options = {"allocation": allocation}
    fed = build("spar", budget=budget, seed=seed, error_feedback=True, options=options)
    ref, rep = AdamDirection(), AdamDirection()
    grad_errs, adam_errs, sizes = [], [], []
    shares = {"lora_A": [], "lora_B": []}
    total = {n: torch.zeros_like(t, dtype=torch.float64) for n, t in grads[0].items()}
    moved_ref, moved_rep = dict(total), dict(total)
    for step, g in enumerate(grads):
        if allocation == "preconditioned":          # the replica's state before this step, as hilo hands it over
            fed.provide_preconditioner(rep.v, rep.steps, rep.beta2, rep.eps)
        payload = fed.encode(g, step)
        decoded = fed.last_decoded
        sizes.append(payload.nbytes)
        grad_errs.append(_norm(_diff(g, decoded)) / _norm(g))
        for n, k in payload.info["ranks"].items():
            for kind in shares:
                if kind in n:
                    shares[kind].append(k > 0)
        d_ref, d_rep = ref.step(g), rep.step(decoded)
        adam_errs.append(_norm(_diff(d_ref, d_rep)) / _norm(d_ref))
        for n in total:
            total[n] += g[n].double()
            moved_ref[n] = moved_ref[n] + d_ref[n]
            moved_rep[n] = moved_rep[n] + d_rep[n]
    plain = evaluate("spar", budget, grads, seed=seed, options={"name": "spar", **options})
    return AllocationRow(model, allocation, seed, budget, len(grads), statistics.fmean(sizes),
                         statistics.fmean(grad_errs), plain.err_1, _norm(fed.residual) / _norm(total),
                         statistics.fmean(adam_errs), _norm(_diff(moved_ref, moved_rep)) / _norm(moved_ref),
                         statistics.fmean(shares["lora_A"]) if shares["lora_A"] else float("nan"),
                         statistics.fmean(shares["lora_B"]) if shares["lora_B"] else float("nan"))


def allocation_markdown(rows: list[AllocationRow]) -> str:
    """Mean and range over seeds per (model, allocation)."""
    lines = ["| model | allocation | seeds | grad_err | grad_err_1 | grad_err_ef | adam_err | adam_err_sum "
             "| A ranked | B ranked |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    keys = list(dict.fromkeys((r.model, r.allocation) for r in rows))
    for model, allocation in keys:
        rs = [r for r in rows if (r.model, r.allocation) == (model, allocation)]

        def cell(field: str, pct: bool = False) -> str:
            vals = [getattr(r, field) for r in rs]
            mean = statistics.fmean(vals)
            if pct:
                return f"{mean:.0%}"
            return f"{mean:.3f} [{min(vals):.3f}, {max(vals):.3f}]"
        lines.append(f"| {model} | {allocation} | {len(rs)} | {cell('grad_err')} | {cell('grad_err_1')} | "
                     f"{cell('grad_err_ef')} | {cell('adam_err')} | {cell('adam_err_sum')} | "
                     f"{cell('a_share', True)} | {cell('b_share', True)} |")
    return "\n".join(lines)


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
    parser.add_argument("--allocations", action="store_true",
                        help="Spar's allocation ablation (energy, normalized, preconditioned) at --budgets' first budget")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (--allocations; default 0)")
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
    if args.allocations:
        from harness.compress.spar import ALLOCATIONS

        rows = []
        for m in models:
            for seed in [int(x) for x in args.seeds.split(",")]:
                grads = lora_gradients(steps=args.steps, seed=seed, progress=True, model=m)
                for allocation in ALLOCATIONS:
                    rows.append(evaluate_allocation(allocation, budgets[0], grads, seed=seed, model=m))
                    print(json.dumps(asdict(rows[-1])), file=sys.stderr, flush=True)
        print(f"Spar's allocation at {budgets[0]:.1%}, {args.steps} steps; mean [min, max] over seeds "
              f"{args.seeds}; torch {torch.__version__}, {torch.get_num_threads()} threads\n")
        print(allocation_markdown(rows))
        if args.csv:
            write_csv(rows, args.csv)
        return 0
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
