"""Forward + backward time of the chat SFT loss: sft_loss (every row's full sequence) against
sft_loss_shared_prefix (the chat template's shared prefix once per batch), in one process.

    python -m harness.commands.sft_timing [--path DIR] [--batch 8] [--reps 3] [--threads 1]

One ChatSFTTask batch (conf/task/chat_sft.yaml: 4 clients, seed 0, client 0's first batch) on
the model folder ``--path`` (default: SmolLM2-135M-Instruct dequantized to fp32 in the cache)
with LoRA r=16 on every linear layer (B drawn small and random, so every gradient is computed);
one warm-up of each, then ``--reps`` alternating timings of each; prints the times, the median
ratio old / new and the two losses.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

SMOLLM2_DIR = Path(__file__).resolve().parents[2] / ".cache" / "narrowband" / "gguf-b179c9523d0e6a0f"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", default=str(SMOLLM2_DIR))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from harness.tasks import build_federated, build_tokenizer, make_lora
    from harness.commands.chat_headroom import task_cfg
    from harness.tasks.data import sft_loss, sft_loss_shared_prefix, shared_prefix_len
    from harness.tasks.models import load_dir

    tok = build_tokenizer({"name": "hf", "path": args.path})
    task = build_federated(task_cfg("sft", []), tok, 4, 0)
    batch = next(task.batches(0, args.batch, torch.Generator().manual_seed(0)))
    model = make_lora(load_dir(args.path, torch.float32), 16, None, ["all-linear"], seed=0)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 1e-3)
    model.train()

    def step(fn) -> tuple[float, float]:
        model.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = fn(model, batch)
        loss.backward()
        return time.perf_counter() - t0, float(loss.detach())

    fns = {"sft_loss": sft_loss, "shared_prefix": sft_loss_shared_prefix}
    losses = {k: step(f)[1] for k, f in fns.items()}          # warm-up
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(args.reps):
        for k, f in fns.items():
            times[k].append(step(f)[0])
    ratios = [a / b for a, b in zip(times["sft_loss"], times["shared_prefix"])]
    out = {"shape": list(batch["input_ids"].shape), "prefix": shared_prefix_len(batch),
           "labels": int((batch["labels"] != -100).sum()), "times_s": times, "losses": losses,
           "median_ratio": statistics.median(ratios)}
    print(f"batch {out['shape']} (shared prefix {out['prefix']} columns, {out['labels']} labels), "
          f"{args.threads} thread(s)")
    for k, v in times.items():
        print(f"  {k:14s} " + " ".join(f"{t:.2f}" for t in v) + f" s   (median {statistics.median(v):.2f} s,"
              f" loss {losses[k]:.6f})")
    print(f"  median ratio sft_loss / shared_prefix: {out['median_ratio']:.2f}x")
    return out


if __name__ == "__main__":
    main()
