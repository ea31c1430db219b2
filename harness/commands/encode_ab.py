"""A/B of Spar's and PowerSGD's encode time in one process, one thread: the current code ("new")
against the behaviour before the last encode change ("old": the float64-sum finiteness check of
every tensor in place of the current one, restored by monkeypatching ``_check_finite``, and
Spar's exact ``svd="gram"`` spectra instead of the default sketch), alternated three times over 20 real LoRA gradients (seed 0) of the tiny and
wide shapes; with the error each Spar variant leaves (err_1, err_ef as in harness.commands.compress_bench.table)
on the same gradients, since a faster encode is only worth having at the same error.
Figures: docs/compress.md, "Encode speed".

    python -m harness.commands.encode_ab
"""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

import torch

VARIANTS = {"spar": {"budget": 0.016}, "powersgd": {"rank": 1}}
OLD_OPTIONS = {"spar": {"svd": "gram"}, "powersgd": {}}


@contextmanager
def old_check(enabled: bool):
    """With ``enabled``, every compressor's finiteness check is the float64 sum it replaced."""
    from harness.compress import base

    check = base.BaseCompressor._check_finite

    def float64_check(self, tensors):
        sums = torch.stack([t.sum(dtype=torch.float64).cpu() for t in tensors.values()])
        if not bool(torch.isfinite(sums).all()):
            raise base.CompressorError(f"{self.name}.encode: NaN or inf values")

    if enabled:
        base.BaseCompressor._check_finite = float64_check
    try:
        yield
    finally:
        base.BaseCompressor._check_finite = check


def main() -> int:
    from harness.commands.compress_bench import gradients as bench_gradients, table as bench_table
    from harness.compress import build

    torch.set_num_threads(1)
    for model in ("tiny", "wide"):
        grads = bench_gradients.lora_gradients(steps=20, model=model)
        mb = 4 * sum(t.numel() for t in grads[0].values()) / 1e6
        times: dict[tuple[str, bool], list[float]] = {}
        for _ in range(3):
            for old in (True, False):
                with old_check(old):
                    for name, kw in VARIANTS.items():
                        c = build(name, seed=0, **kw, **(OLD_OPTIONS[name] if old else {}))
                        for s, g in enumerate(grads):
                            t0 = time.perf_counter()
                            c.encode(g, s)
                            times.setdefault((name, old), []).append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        for name in VARIANTS:
            o, n = med[(name, True)], med[(name, False)]
            print(f"{model} {name}: old {o * 1e3:.2f} ms ({mb / o:.0f} MB/s)  new {n * 1e3:.2f} ms "
                  f"({mb / n:.0f} MB/s)  x{o / n:.2f}")
        print(f"{model} spar/powersgd time: old {med[('spar', True)] / med[('powersgd', True)]:.2f}  "
              f"new {med[('spar', False)] / med[('powersgd', False)]:.2f}")
        for label, opts in (("old (gram)", {"svd": "gram"}), ("new (sketch)", {})):
            row = bench_table.evaluate(f"spar {label}", 0.016, grads, options={"name": "spar", **opts})
            print(f"{model} spar {label}: err_1 {row.err_1:.4f}  err_ef {row.err_ef:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
