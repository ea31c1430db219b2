"""Compressors compared at equal bytes on real LoRA gradients: the README's compressor table.

    python -m harness.compress.bench            # markdown table (a few minutes on one CPU thread)
    python -m harness.compress.bench --json     # the same rows as JSON
    python -m harness.compress.bench --model wide,small --csv results/tables/compress_wide.csv
    python -m harness.compress.bench --allocations --model tiny,wide --seeds 0,1,2 \
        --csv results/tables/spar_allocation.csv      # Spar's allocation ablation (below)
    python -m harness.compress.bench --model smollm2 --rank 16,8,64 --steps 10 --train-threads 2 \
        --csv results/tables/compress_real.csv --plot results/plots/spar_ranks_real.png   # a real LM

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

Real models (``--model smollm2``, the model preset's packaged GGUF, or ``--model hf:PATH``, a
local HF chat-model folder or a GGUF file; GGUFs are materialised once into the cache, fp32):
peft LoRA at each ``--rank`` (scale 1, every linear layer but the output: 210 adapted layers, 420
matrices for SmolLM2) trained by SFT on the chat task's training split (conf/task/chat_sft.yaml:
"17 + 5 = 22" and eos after the chat prompt, batches of ``task.batch_size`` = 8, one client
holding the task's 512 training examples); AdamW (lr ``--lr``, 3e-4, no weight decay, gradient
norm clipped at 1: the recipe of harness.tasks.chat_headroom) applies every step, ``--warmup``
steps first, then ``steps`` consecutive gradients are recorded before clipping (what hilo's
learner hands its compressor). Spar's ranks per matrix and step (with error feedback, as hilo's
learner ships them) go to ``--ranks-csv`` (default: next to ``--csv``, ``*_spar_ranks.csv``) and
``--plot`` draws where they go (mean rank per layer and module, A and B; ``plot_real_ranks``) at
the first ``--rank``, and at the others to ``*_r<rank>.png``.

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
import os
import re
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
    "powersgd-k1": {"name": "powersgd", "rank": 1},
    "powersgd-k2": {"name": "powersgd", "rank": 2},
    "powersgd-k4": {"name": "powersgd", "rank": 4},
    "topk": {"name": "topk"},
    "randk": {"name": "randk"},
    "quant": {"name": "quant", "dtype": "fp32"},
}
PRESET_VARIANTS = ("spar", "spar-int8", "powersgd", "powersgd-r1", "topk", "randk", "quant")   # --model presets
REAL_VARIANTS = ("spar", "powersgd", "powersgd-k1", "powersgd-k2", "powersgd-k4", "topk", "randk", "quant")
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


SMOLLM2_PRESET = "smollm2"        # conf/model/smollm2.yaml: the packaged GGUF of SmolLM2-135M-Instruct


def real_source(model: str) -> str | None:
    """The model path of a real ``--model`` (``smollm2``: its preset's ``path``; ``hf:PATH``: PATH),
    None for the bench's own model and the synthetic presets."""
    if model.startswith("hf:"):
        if not model[3:]:
            raise CompressorError("--model: 'hf:' needs a path (hf:DIR, a local HF folder, or hf:FILE.gguf)")
        return model[3:]
    if model == SMOLLM2_PRESET:
        from pathlib import Path

        import yaml

        path = Path(__file__).resolve().parent.parent / "conf" / "model" / f"{model}.yaml"
        return str(yaml.safe_load(path.read_text())["path"])
    return None


def check_real(model: str) -> None:
    """Fail before any work when a real ``--model``'s file or folder is missing (CompressorError:
    one line naming the fix). GGUFs are resolved here, not materialised."""
    from pathlib import Path

    from harness.errors import ConfigError
    from harness.tasks.gguf_cache import is_gguf, resolve_file

    source = real_source(model)
    try:
        if is_gguf(source):
            resolve_file(source, "--model")
        elif not (Path(source) / "config.json").is_file():
            raise CompressorError(f"--model: {model!r} is not allowed; hf:PATH needs a local HF model folder "
                                  f"(with config.json) or a .gguf file")
    except ConfigError as err:
        raise CompressorError(str(err)) from None


def chat_gradients(source: str, steps: int = 10, warmup: int = 3, seed: int = 0, rank: int = 16, lr: float = 3e-4,
                   overrides: tuple[str, ...] = (), progress: bool = False) -> list[dict[str, torch.Tensor]]:
    """``steps`` consecutive LoRA gradients (name -> fp32 tensor, before clipping) of the chat
    model at ``source`` (a local HF folder or a GGUF file), SFT on the chat task's training
    split with AdamW applying each step (module doc, "Real models"); ``overrides``: task.KEY=VALUE."""
    from tqdm import tqdm

    from harness.tasks.chat import ChatSFTTask
    from harness.tasks.chat_headroom import fresh, model_folder, task_cfg
    from harness.tasks.tokenizer import Tokenizer

    folder = model_folder(source)
    task = ChatSFTTask(task_cfg("sft", list(overrides)), Tokenizer.from_pretrained(folder), n_clients=1, seed=seed)
    policy = fresh(folder, rank, seed).train()
    params = {n: p for n, p in policy.named_parameters() if p.requires_grad}
    opt = torch.optim.AdamW(params.values(), lr=lr, weight_decay=0.0)
    batches = task.batches(0)
    out = []
    for step in tqdm(range(warmup + steps), desc=f"LoRA gradients (r={rank})", disable=not frames(progress),
                     leave=False):
        opt.zero_grad(set_to_none=True)
        task.loss(policy, next(batches)).backward()
        if step >= warmup:
            out.append({n: p.grad.detach().clone() for n, p in params.items()})
        torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
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
    lora_rank: int = 0              # the adapter's LoRA rank r
    steps: int = 0                  # gradients the row's metrics average over


@dataclass
class RankRow:
    """Spar's rank of one matrix at one step (with error feedback, as hilo's learner ships it)."""
    model: str
    lora_rank: int
    budget: float
    step: int
    matrix: str                     # "L<layer> <module> <A|B>" (the parameter's name where it has no layer)
    layer: int                      # decoder layer index (-1: none in the name)
    module: str                     # q_proj ... down_proj
    part: str                       # A or B
    k: int                          # allocated rank (0: not sent)


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


_MATRIX = re.compile(r"layers\.(\d+)\..*?(\w+_proj)\.lora_([AB])\b")


def rank_rows(model: str, lora_rank: int, budget: float, ranks: list[dict[str, int]]) -> list[RankRow]:
    """``evaluate``'s per-step ``{matrix: rank}`` as tidy rows (layer, module, A/B from the name)."""
    out = []
    for step, alloc in enumerate(ranks):
        for name, k in alloc.items():
            m = _MATRIX.search(name)
            layer, module, part = (int(m.group(1)), m.group(2), m.group(3)) if m else (-1, name, "")
            short = f"L{layer} {module} {part}" if m else name
            out.append(RankRow(model, lora_rank, budget, step, short, layer, module, part, int(k)))
    return out


def plot_real_ranks(rows: list[RankRow], path: str, lora_rank: int | None = None) -> str:
    """Where Spar puts its ranks: one panel per budget, a heatmap of layers (rows) x module and
    A/B (columns), colour = allocated rank averaged over steps (grey: never sent; the title: the
    share of (step, matrix) pairs of A and of B with rank > 0), at one LoRA
    rank (``lora_rank``; None: the first in ``rows``). The report's style (harness.report.style);
    writes the PNG at ``path`` and returns its caption."""
    import matplotlib
    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap

    from harness.report.style import DOUBLE, figure, styled

    lora_rank = rows[0].lora_rank if lora_rank is None else lora_rank
    rows = [r for r in rows if r.lora_rank == lora_rank and r.layer >= 0]
    if not rows:
        raise ValueError(f"plot_real_ranks: no Spar ranks at LoRA rank {lora_rank}")
    budgets = sorted({r.budget for r in rows})
    modules = [t for t in TARGETS if any(r.module == t for r in rows)]
    columns = [(m, part) for m in modules for part in ("A", "B")]
    layers = max(r.layer for r in rows) + 1
    steps = max(r.step for r in rows) + 1
    ramp = matplotlib.colormaps["YlGnBu"]
    cmap = LinearSegmentedColormap.from_list("ranks", [ramp(0.2 + 0.8 * i / 63) for i in range(64)]).with_extremes(
        bad="#e6e6e6")
    grids, shares = [], []
    for budget in budgets:
        grid = np.zeros((layers, len(columns)))
        for r in rows:
            if r.budget == budget:
                grid[r.layer, columns.index((r.module, r.part))] += r.k / steps
        sent = {part: sum(r.k > 0 for r in rows if r.budget == budget and r.part == part) /
                max(1, sum(1 for r in rows if r.budget == budget and r.part == part)) for part in ("A", "B")}
        grids.append(np.ma.masked_equal(grid, 0.0))
        shares.append(sent)
    vmax = max(float(g.max()) for g in grids if g.count()) if any(g.count() for g in grids) else 1.0
    with styled():
        fig, axes = figure(len(budgets), height=min(8.0, 0.12 * layers + 1.4))
        fig.set_size_inches(DOUBLE, min(8.0, 0.12 * layers + 1.4))
        for ax, budget, grid, sent in zip(axes, budgets, grids, shares):
            image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=vmax)
            ax.set_xticks(range(len(columns)))
            ax.set_xticklabels([f"{m.replace('_proj', '')} {p}" for m, p in columns], rotation=90, fontsize=5.5)
            for i in range(2, len(columns), 2):
                ax.axvline(i - 0.5, color="white", lw=1.0)
            ax.set_yticks(range(0, layers, max(1, layers // 15)))
            ax.grid(False)
            ax.set_title(f"{budget:.1%} budget: sent A {sent['A']:.0%}, B {sent['B']:.0%}", fontsize=7)
        axes[0].set_ylabel("Decoder layer")
        bar = fig.colorbar(image, ax=axes, pad=0.01)
        bar.set_label(f"Allocated rank k, mean over {steps} steps (grey: never sent)")
        from pathlib import Path

        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        matplotlib.pyplot.close(fig)
    return (f"Spar's rank per LoRA matrix (layer x module, A and B), mean over {steps} consecutive SFT gradients "
            f"with error feedback, LoRA r={lora_rank}, at budgets {', '.join(f'{b:.1%}' for b in budgets)}.")


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


def _real_table(args, m: str, labels: list[str] | None, budgets: list[float], lora_ranks: list[int],
                all_rows: list, reports: list, rank_table: list) -> None:
    """The compressor table of real model ``m`` at each LoRA rank (module doc, "Real models"); the
    CSVs are rewritten after each rank so a bounded run keeps what it measured."""
    from tqdm import tqdm

    labels = labels or list(REAL_VARIANTS)
    warmup = 3 if args.warmup is None else args.warmup
    for r in lora_ranks:
        t0 = time.perf_counter()
        torch.set_num_threads(args.train_threads or args.threads)
        grads = chat_gradients(real_source(m), steps=args.steps, warmup=warmup, rank=r, lr=args.lr,
                               overrides=tuple(args.overrides), progress=True)
        torch.set_num_threads(args.threads)
        train_s = time.perf_counter() - t0
        dense = 2 * sum(t.numel() for t in grads[0].values())
        rows = []
        for c, b in tqdm([(c, b) for b in budgets for c in labels], desc=f"compressors ({m}, r={r})",
                         disable=not frames()):
            ranks: list[dict[str, int]] | None = [] if c == "spar" else None
            rows.append(evaluate(c, b, grads, ranks=ranks))
            if ranks is not None and not _failed(rows[-1]):
                rank_table += rank_rows(m, r, b, ranks)
        for row in rows:
            row.model, row.lora_rank = m, r
        spectra_ms = time_spectra(grads[0])
        all_rows += rows
        reports.append({"model": m, "lora_rank": r, "dense_bf16_bytes": dense, "steps": len(grads),
                        "matrices": len(grads[0]), "gradients_s": train_s, "spectra_ms": spectra_ms,
                        "rows": [asdict(x) for x in rows]})
        if not args.json:
            print(f"## {m}, LoRA r={r}\n\n" + markdown(rows, dense, spectra_ms, len(grads[0])))
            print(f"\n{len(grads)} steps after {warmup} warm-up steps (gradients: {train_s:.0f} s at "
                  f"{args.train_threads or args.threads} threads); torch {torch.__version__}, "
                  f"{torch.get_num_threads()} threads for the compressors; load {os.getloadavg()[0]:.1f}\n", flush=True)
        del grads
        if args.csv:
            write_csv(all_rows, args.csv)
        if args.ranks_csv and rank_table:
            write_csv(rank_table, args.ranks_csv)
        if args.plot and any(x.lora_rank == r for x in rank_table):
            stem = args.plot[:-4] if args.plot.endswith(".png") else args.plot
            path = args.plot if r == lora_ranks[0] else f"{stem}_r{r}.png"
            print(f"{path}: {plot_real_ranks(rank_table, path, r)}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.compress.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="gradients (steps) per run (default 50)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="optimizer steps before the first recorded gradient (default 5; real models 3)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)),
                        help="fractions of the bf16 adapter bytes, comma-separated")
    parser.add_argument("--compressors", default=None,
                        help=f"subset of {', '.join(VARIANTS)} (default: {', '.join(PRESET_VARIANTS)}; "
                             f"real models: {', '.join(REAL_VARIANTS)})")
    parser.add_argument("--model", default="bench",
                        help="comma-separated: bench (default) and/or model presets (tiny, small, wide), "
                             "or a real chat model: smollm2, hf:DIR or hf:FILE.gguf")
    parser.add_argument("--rank", default="16", help="real models: comma-separated LoRA ranks (default 16)")
    parser.add_argument("--lr", type=float, default=3e-4, help="real models: AdamW's learning rate (default 3e-4)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a shared machine, more threads than free cores make "
                             "OpenMP timings swing 100x)")
    parser.add_argument("--train-threads", type=int, default=None,
                        help="real models: torch threads for the forward and backward passes (default --threads)")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of markdown")
    parser.add_argument("--allocations", action="store_true",
                        help="Spar's allocation ablation (energy, normalized, preconditioned) at --budgets' first budget")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (--allocations; default 0)")
    parser.add_argument("--csv", help="also write the rows to this CSV (e.g. results/tables/compress_wide.csv)")
    parser.add_argument("--ranks-csv", help="real models: Spar's rank per matrix and step (default: --csv's "
                                            "name with _spar_ranks)")
    parser.add_argument("--plot", help="real models: draw where Spar puts its ranks to this PNG (first --rank)")
    parser.add_argument("overrides", nargs="*", help="real models: task.KEY=VALUE on conf/task/chat_sft.yaml")
    args = parser.parse_intermixed_args(argv)
    torch.set_num_threads(args.threads)
    from tqdm import tqdm

    labels = args.compressors.split(",") if args.compressors else None
    unknown = [c for c in labels or [] if c not in VARIANTS]
    if unknown:
        print(f"--compressors: {unknown[0]!r} is not allowed; choose from {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    budgets = [float(b) for b in args.budgets.split(",")]
    models = args.model.split(",")
    bad = [o for o in args.overrides if not o.startswith("task.") or "=" not in o]
    if bad:
        print(f"overrides: {bad[0]!r} is not allowed; write task.KEY=VALUE", file=sys.stderr)
        return 2
    try:
        lora_ranks = [int(r) for r in args.rank.split(",")]
    except ValueError:
        lora_ranks = [0]
    if any(r < 1 for r in lora_ranks):
        print(f"--rank: {args.rank!r} is not allowed; give comma-separated integers >= 1", file=sys.stderr)
        return 2
    if args.steps < 1:
        print(f"--steps: {args.steps} is not allowed; need >= 1", file=sys.stderr)
        return 2
    if args.warmup is not None and args.warmup < 0:
        print(f"--warmup: {args.warmup} is not allowed; need >= 0", file=sys.stderr)
        return 2
    try:
        for m in models:
            if real_source(m) is None:
                model_config(m)
            else:
                check_real(m)
    except CompressorError as err:
        print(str(err), file=sys.stderr)
        return 2
    if args.allocations:
        from harness.compress.spar import ALLOCATIONS

        if any(real_source(m) for m in models):
            print("--allocations: real models are not allowed here; choose bench or a model preset", file=sys.stderr)
            return 2
        rows = []
        for m in models:
            for seed in [int(x) for x in args.seeds.split(",")]:
                grads = lora_gradients(steps=args.steps, warmup=5 if args.warmup is None else args.warmup, seed=seed,
                                       progress=True, model=m)
                for allocation in ALLOCATIONS:
                    rows.append(evaluate_allocation(allocation, budgets[0], grads, seed=seed, model=m))
                    print(json.dumps(asdict(rows[-1])), file=sys.stderr, flush=True)
        print(f"Spar's allocation at {budgets[0]:.1%}, {args.steps} steps; mean [min, max] over seeds "
              f"{args.seeds}; torch {torch.__version__}, {torch.get_num_threads()} threads\n")
        print(allocation_markdown(rows))
        if args.csv:
            write_csv(rows, args.csv)
        return 0
    if args.csv and not args.ranks_csv and any(real_source(m) for m in models):
        stem = args.csv[:-4] if args.csv.endswith(".csv") else args.csv
        args.ranks_csv = f"{stem}_spar_ranks.csv"
    all_rows, reports, rank_table = [], [], []
    for m in models:
        if real_source(m) is not None:
            _real_table(args, m, labels, budgets, lora_ranks, all_rows, reports, rank_table)
            continue
        grads = lora_gradients(steps=args.steps, warmup=5 if args.warmup is None else args.warmup, progress=True,
                               model=m)
        dense = 2 * sum(t.numel() for t in grads[0].values())
        ident = build("identity")
        ident_err = statistics.fmean(_norm(_diff(g, ident.decode(ident.encode(g)))) / _norm(g) for g in grads)
        preset_labels = labels or list(PRESET_VARIANTS)
        rows = [evaluate(c, b, grads) for c, b in tqdm([(c, b) for b in budgets for c in preset_labels],
                                                       desc=f"compressors ({m})", disable=not frames())]
        lora_rank = model_config(m)[1] or 64
        for r in rows:
            r.model, r.lora_rank = m, lora_rank
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
