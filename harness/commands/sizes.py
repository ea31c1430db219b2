"""What each method ships for one update of a real model's LoRA adapter, and how long it takes.

    python -m harness.commands.sizes --preset llama3-8b --rank 64              # table
    python -m harness.commands.sizes --preset llama3-8b --rank 64 --json       # the same as JSON
    python -m harness.commands.sizes --config /models/x/config.json --targets q_proj,v_proj --budget 0.005
    python -m harness.commands.sizes --all --rank 64                           # every named preset

Shapes come from the model skeleton on the meta device (transformers' AutoModelForCausalLM
of the config; no weights) and ``harness.tasks.targets`` (``--targets all-linear`` by default:
every linear / Conv1D layer but the output, i.e. the seven projections of a Llama). LoRA on a
d_in -> d_out layer at rank r has A (r x d_in) and B (d_out x r).

Bytes per method, from the project's own wire formats (nothing re-derived here):
- full sync bf16 / fp32: ``onpolicy.state.pack_flat``: FLAT_OVERHEAD (24 B) + elements x 2 / 4.
- low-rank r=1: full sync bf16 of the adapter trained at rank 1.
- HiLo+Spar at ``--budget`` (a fraction of the bf16 adapter bytes, header included:
  ``compress.base.resolve_budget``): the payload is at most that many bytes. The ranks it buys
  are from Spar's own allocator (``compress.allocate.allocate_greedy``) and header
  (``compress.spar.layout``), under an ASSUMPTION stated in the output: every singular value
  of every gradient matrix is equal (flat spectra). With flat spectra the greedy buys the
  cheapest ranks first (the smallest m + n, e.g. the B-gradients of GQA's k/v projections);
  real gradients have decaying spectra, so their allocation differs (the measured one is in
  the run rows). Also printed: the uniform rank k every matrix could get at the budget.
- PowerSGD rank 1: header + one rank-1 factor pair of every matrix (``compress.factors``);
  whether it fits the budget is said.
- delta (compressed parameter delta): the same budget as HiLo (same compressor, same bytes).
- SPRA / FFA-LoRA uplink: B only; FedIT uplink: A and B. Numbers only, in fp32 as the
  federated codec ships them (its safetensors header, ~60 B per tensor, is not counted).
Transfer time = bytes x 8 / rate (no latency, no protocol overhead: the ``model`` backend's
ideal), at 10, 100 and 1000 Mbit/s by default.

Named presets, copied from the published Hugging Face config.json of each model (fields
used: model_type, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
num_key_value_heads, vocab_size, tie_word_embeddings):
- llama3-8b     meta-llama/Meta-Llama-3-8B:   4096 / 14336 / 32 layers / 32 heads / 8 kv / 128256
- qwen2.5-7b    Qwen/Qwen2.5-7B:              3584 / 18944 / 28 / 28 / 4 / 152064
- qwen2.5-0.5b  Qwen/Qwen2.5-0.5B:            896 / 4864 / 24 / 14 / 2 / 151936 (tied embeddings)
- mistral-7b    mistralai/Mistral-7B-v0.1:    4096 / 14336 / 32 / 32 / 8 / 32000
and the project's own model presets (conf/model/*.yaml: tiny, small, wide).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    "llama3-8b": dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, tie_word_embeddings=False),
    "qwen2.5-7b": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "mistral-7b": dict(model_type="mistral", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, tie_word_embeddings=False),
}
RATES_MBIT = (10.0, 100.0, 1000.0)
BUDGET = 0.016
FLAT_SPECTRA = ("every singular value of every gradient matrix equal (flat spectra): the greedy then buys the "
                "cheapest ranks (smallest m+n) first; real, decaying spectra are allocated differently")


@dataclass
class Method:
    """Bytes of one update by one method; ``seconds`` per rate (Mbit/s, as a string key)."""
    method: str
    bytes: int
    fraction: float                      # of full sync bf16
    seconds: dict[str, float] = field(default_factory=dict)
    note: str = ""


@dataclass
class Sizes:
    """The adapter of one model at one rank, and what each method ships per update."""
    model: str
    rank: int
    targets: list[str]
    matrices: int                        # LoRA A and B tensors
    adapter_params: int
    budget: float
    methods: list[Method]
    hilo_ranks: dict[str, list[int]]     # "<module>.lora_A|B" -> sorted distinct ranks (flat-spectra greedy)
    uniform_rank: int                    # the largest k every matrix can have within the budget
    assumption: str = FLAT_SPECTRA
    projection: dict[str, Any] = field(default_factory=dict)   # --compute-s: projected update times (see project())


ON_POLICY = ("full_sync_bf16", "full_sync_fp32", "lowrank_r1", "hilo_spar", "powersgd_r1")


def project(s: Sizes, compute_s: float, encode_mbs: float | None = None) -> dict[str, Any]:
    """A PROJECTION, not a measurement: the on-policy update time of each method for this model as
    the ``model`` backend's ideal would price it: a user-given compute time per update (rollouts +
    the learner's step, the same for every method), plus, for HiLo+Spar, the encode time of the fp32
    adapter gradient at a user-given throughput (left out when not given; PowerSGD's row never
    includes one), plus bytes x 8 / rate (no latency, no protocol overhead). Speedups are against
    bf16 full sync at the same rate."""
    gradient_fp32 = 4 * s.adapter_params          # what the learner encodes (harness.commands.compress_bench's MB)
    encode = gradient_fp32 / (encode_mbs * 1e6) if encode_mbs else 0.0
    out: dict[str, Any] = {"compute_s": compute_s, "encode_mbs": encode_mbs, "encode_s": encode,
                           "note": "projection: user-given compute" + (", user-given encode throughput" if encode_mbs
                                                                        else ", encode time not included")
                                   + "; transfer = bytes x 8 / rate, no latency or protocol overhead",
                           "rates": {}}
    for rate in s.methods[0].seconds:
        times = {m.method.split("@")[0]: compute_s + m.seconds[rate]
                 + (encode if m.method.startswith("hilo_") else 0.0)
                 for m in s.methods if m.method.split("@")[0] in ON_POLICY}
        full = times["full_sync_bf16"]
        out["rates"][rate] = {k: {"update_s": v, "speedup": full / v} for k, v in times.items()}
    return out


def model_config(preset: str | None = None, config: str | None = None):
    """A transformers config: a named preset, a project model preset, or a local config.json."""
    from transformers import AutoConfig

    if config:
        path = Path(config)
        path = path / "config.json" if path.is_dir() else path
        if not path.is_file():
            raise SystemExit(f"error: --config: {config!r} is not a config.json (or a folder holding one)")
        return AutoConfig.from_pretrained(str(path.parent), local_files_only=True)
    if preset in PRESETS:
        fields = dict(PRESETS[preset])
        return AutoConfig.for_model(fields.pop("model_type"), **fields)
    conf = Path(__file__).resolve().parent.parent / "conf" / "model" / f"{preset}.yaml"
    if preset and conf.is_file() and preset != "hf":
        import yaml

        from harness.tasks.models import llama_config
        from harness.tasks.tokenizer import CHARS, SPECIALS
        return llama_config(yaml.safe_load(conf.read_text()), len(SPECIALS) + len(CHARS))
    allowed = sorted(PRESETS) + sorted(p.stem for p in conf.parent.glob("*.yaml") if p.stem != "hf")
    raise SystemExit(f"error: --preset: {preset!r} is not allowed; choose one of {', '.join(allowed)}")


def lora_shapes(config, rank: int, targets: list[str]) -> tuple[list[tuple[str, tuple[int, int]]], list[str]]:
    """(peft parameter name, shape) of every LoRA A and B tensor, in module order; the targets."""
    import torch
    from transformers import AutoModelForCausalLM

    from harness.tasks.layers import adaptable_layers, resolve_targets

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    chosen = resolve_targets(model, targets)
    out = []
    for name, (d_in, d_out) in adaptable_layers(model).items():
        if name.split(".")[-1] in chosen:
            out.append((f"base_model.model.{name}.lora_A.default.weight", (min(rank, d_in, d_out), d_in)))
            out.append((f"base_model.model.{name}.lora_B.default.weight", (d_out, min(rank, d_in, d_out))))
    return out, chosen


def _full_sync(numel: int, elem: int) -> int:
    from harness.onpolicy.state import FLAT_OVERHEAD
    return FLAT_OVERHEAD + numel * elem


def sizes(config, name: str, rank: int, targets: list[str], budget: float = BUDGET,
          rates_mbit: tuple[float, ...] = RATES_MBIT) -> Sizes:
    """Bytes and transfer seconds per method for one update (module docstring)."""
    import numpy as np

    from harness.compress import factors
    from harness.compress.allocate import allocate_greedy
    from harness.compress.base import resolve_budget
    from harness.compress.payload import TensorEntry
    from harness.compress.spar import layout

    shapes, chosen = lora_shapes(config, rank, targets)
    numel = sum(m * n for _, (m, n) in shapes)
    numel_r1 = sum(m * n // rank for _, (m, n) in shapes)     # every A and B has one side = rank
    b_numel = sum(m * n for name, (m, n) in shapes if ".lora_B." in name)
    entries = [TensorEntry(n, s, "fp32") for n, s in shapes]
    meta = {"dtype": "bf16", "dense_dtype": "bf16"}
    _, fixed = layout(entries, meta, "bf16", "bf16")
    costs = [factors.rank_nbytes(m, n, "bf16") for _, (m, n) in shapes]
    cap = resolve_budget(budget, None, numel)
    ranks = allocate_greedy([np.ones(min(s)) for _, s in shapes], costs, max(0, cap - fixed))
    spar_bytes = fixed + sum(k * c for k, c in zip(ranks, costs))
    uniform = 0
    while uniform < rank and fixed + sum(min(uniform + 1, *s) * c for (_, s), c in zip(shapes, costs)) <= cap:
        uniform += 1
    psgd1 = fixed + sum(costs)
    full = _full_sync(numel, 2)
    rows = [("full_sync_bf16", full, ""), ("full_sync_fp32", _full_sync(numel, 4), ""),
            ("lowrank_r1", _full_sync(numel_r1, 2), "full sync bf16 of a rank-1 adapter"),
            (f"hilo_spar@{budget:.3g}", spar_bytes, f"budget {cap} B; ranks under flat spectra (see assumption)"),
            ("powersgd_r1", psgd1, "fits the budget" if psgd1 <= cap else f"over the {budget:.3g} budget ({cap} B): "
             "a budget-bound powersgd ships a rotating subset at rank 1"),
            (f"delta_spar@{budget:.3g}", spar_bytes, "same compressor and budget as hilo"),
            ("spra_ffa_uplink", 4 * b_numel, "B only, fp32 numbers (federated codec), per client"),
            ("fedit_uplink", 4 * numel, "A and B, fp32 numbers, per client")]
    methods = [Method(m, int(b), b / full, {f"{r:g}": b * 8 / (r * 1e6) for r in rates_mbit}, note)
               for m, b, note in rows]
    by_kind: dict[str, set[int]] = {}
    for (n, _), k in zip(shapes, ranks):
        module = n.split(".lora_")[0].split(".")[-1]
        by_kind.setdefault(f"{module}.lora_{n.split('.lora_')[1][0]}", set()).add(int(k))
    return Sizes(name, rank, chosen, len(shapes), numel, budget, methods,
                 {k: sorted(v) for k, v in sorted(by_kind.items())}, uniform)


def _human(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def table(s: Sizes) -> str:
    rates = list(s.methods[0].seconds)
    lines = [f"{s.model}: LoRA r={s.rank} on {', '.join(s.targets)}: {s.matrices} matrices, "
             f"{s.adapter_params:,} parameters", "",
             "| method | bytes | of full bf16 | " + " | ".join(f"s @ {r} Mbit/s" for r in rates) + " | note |",
             "|---|---:|---:|" + "---:|" * len(rates) + "---|"]
    for m in s.methods:
        lines.append(f"| {m.method} | {m.bytes:,} ({_human(m.bytes)}) | {m.fraction:.2%} | "
                     + " | ".join(f"{m.seconds[r]:.4g}" for r in rates) + f" | {m.note} |")
    ranks = ", ".join(f"{k}: {'/'.join(map(str, v))}" for k, v in s.hilo_ranks.items())
    lines += ["", f"HiLo+Spar at {s.budget:.3g}: ranks per matrix (greedy) {ranks}; uniform rank that fits: "
                  f"{s.uniform_rank}", f"Assumption: {s.assumption}."]
    if s.projection:
        p = s.projection
        methods = list(next(iter(p["rates"].values())))
        lines += ["", f"PROJECTED update time (s) and speedup vs bf16 full sync, compute {p['compute_s']:g} s per update"
                      + (f", encode at {p['encode_mbs']:g} MB/s ({p['encode_s']:.3g} s)" if p["encode_mbs"] else "")
                      + f" ({p['note']}):", "",
                  "| rate (Mbit/s) | " + " | ".join(methods) + " |", "|---|" + "---:|" * len(methods)]
        for rate, row in p["rates"].items():
            lines.append(f"| {rate} | " + " | ".join(f"{row[m]['update_s']:.4g} ({row[m]['speedup']:.2f}x)"
                                                      for m in methods) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.commands.sizes", description=__doc__.split("\n")[0])
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--preset", default="llama3-8b", help=f"named config: {', '.join(PRESETS)}, tiny, small, wide")
    src.add_argument("--config", help="a local config.json (or its folder)")
    src.add_argument("--all", action="store_true", help="every named preset (not the project's own)")
    parser.add_argument("--rank", type=int, default=64, help="LoRA rank r (default 64)")
    parser.add_argument("--targets", default="all-linear",
                        help="comma-separated module names, all-linear (default) or auto (peft's default)")
    parser.add_argument("--budget", type=float, default=BUDGET,
                        help="HiLo budget, a fraction of the bf16 adapter bytes (default 0.016)")
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES_MBIT), help="Mbit/s, comma-separated")
    parser.add_argument("--compute-s", type=float, default=None,
                        help="PROJECTION: compute seconds per on-policy update (rollouts + learner step) on your "
                             "hardware; adds projected update times and speedups per method and rate")
    parser.add_argument("--encode-mbs", type=float, default=None,
                        help="with --compute-s: Spar's encode throughput in MB/s of fp32 gradient (as "
                             "harness.commands.compress_bench reports it), added to "
                             "HiLo+Spar's update (default: encode time left out, and said)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a markdown table")
    args = parser.parse_args(argv)
    if args.compute_s is not None and args.compute_s < 0:
        print(f"error: --compute-s: {args.compute_s} must be >= 0 seconds per update", file=sys.stderr)
        return 2
    if args.encode_mbs is not None and not args.encode_mbs > 0:
        print(f"error: --encode-mbs: {args.encode_mbs} must be > 0 MB/s", file=sys.stderr)
        return 2
    if args.encode_mbs is not None and args.compute_s is None:
        print(f"error: --encode-mbs: {args.encode_mbs} needs --compute-s (it only prices a projection)", file=sys.stderr)
        return 2
    if args.rank < 1:
        print(f"error: --rank: {args.rank} must be an integer >= 1", file=sys.stderr)
        return 2
    if not 0 < args.budget <= 1:
        print(f"error: --budget: {args.budget} is outside (0, 1]; it is a fraction of the bf16 adapter bytes",
              file=sys.stderr)
        return 2
    try:
        rates = tuple(float(r) for r in args.rates.split(","))
        assert all(r > 0 for r in rates)
    except (ValueError, AssertionError):
        print(f"error: --rates: {args.rates!r} must be positive Mbit/s numbers, comma-separated", file=sys.stderr)
        return 2
    from harness.errors import ConfigError

    names = list(PRESETS) if args.all else [args.config or args.preset]
    out = []
    try:
        for name in names:
            config = model_config(None if args.config else name, args.config)
            out.append(sizes(config, name, args.rank, args.targets.split(","), args.budget, rates))
            if args.compute_s is not None:
                out[-1].projection = project(out[-1], args.compute_s, args.encode_mbs)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(s) for s in out] if args.all else asdict(out[0]), indent=1))
    else:
        print("\n\n".join(table(s) for s in out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
