"""Spar's allocation ablation (harness.commands.compress_bench ``--allocations``).

Allocation ablation (``--allocations``; Spar's ``compressor.options.allocation``, one budget,
default 1.6%): per model, seed and allocation, the stream g_1..g_T is encoded with error
feedback as hilo's learner does, and two Adam optimizers run side by side without parameters:
the reference on g_t, the replica on the decoded g^_t (what hilo's learner and workers step on;
its second moments are what ``preconditioned`` reads, exactly as the learner hands them over).
Each yields the step direction Delta_t = m^_t / (sqrt(v^_t) + eps) (Adam, betas 0.9/0.999,
eps 1e-8; the learning rate is a common factor and left out). Metrics (``AllocationRow``):
  grad_err:  mean_t ||g^_t - g_t|| / ||g_t|| with error feedback (per step)
  grad_err_1 / grad_err_ef: err_1 and err_ef of harness.commands.compress_bench.table, for this allocation
  adam_err:  mean_t ||Delta^_t - Delta_t|| / ||Delta_t|| (the update the replicas apply vs the
             uncompressed one, per step)
  adam_err_sum: ||sum_t Delta^_t - sum_t Delta_t|| / ||sum_t Delta_t|| (where T steps at a
             constant lr move the adapter; no feedback of the parameters into the stream: the
             stream is fixed, recorded from training on the true gradient)
  a_share / b_share: fraction of (step, matrix) pairs of lora_A / lora_B matrices with rank > 0
The stream's own optimizer (AdamW 2e-3, on the true gradient) is unrelated to these two.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from harness.compress import build
from harness.commands.compress_bench.table import _diff, _norm, evaluate


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
