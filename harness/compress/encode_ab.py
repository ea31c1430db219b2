"""A/B of Spar's and PowerSGD's encode time in one process, one thread: the current code ("new")
against the behaviour before issue 15's encode changes ("old": the inf-norm finiteness check of
every tensor, and eigvalsh for every matrix then eigh for those that get a rank, at any budget),
restored by monkeypatching; alternated three times over 20 real LoRA gradients of the tiny and
wide shapes. Figures: docs/compress.md, "Encode speed".

    python -m harness.compress.encode_ab
"""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager

import torch


@contextmanager
def old_behaviour(enabled: bool):
    from harness.compress import base, spar

    energies, prepare = spar.Spar._energies, base.BaseCompressor._prepare

    def old_energies(self, groups, vectors=False):
        return energies(self, groups, False)

    def old_prepare(self, tensors, step):
        detached = [t.detach() for t in tensors.values()]
        torch.stack([p.float().cpu() for p in torch._foreach_norm(detached, float("inf"))])
        return prepare(self, tensors, step)

    if enabled:
        spar.Spar._energies, base.BaseCompressor._prepare = old_energies, old_prepare
    try:
        yield
    finally:
        spar.Spar._energies, base.BaseCompressor._prepare = energies, prepare


def main() -> int:
    from harness.compress import build
    from harness.compress.bench import lora_gradients

    torch.set_num_threads(1)
    for model in ("tiny", "wide"):
        grads = lora_gradients(steps=20, model=model)
        mb = 4 * sum(t.numel() for t in grads[0].values()) / 1e6
        times: dict[tuple[str, bool], list[float]] = {}
        for _ in range(3):
            for old in (True, False):
                with old_behaviour(old):
                    for name, kw in (("spar", {"budget": 0.016}), ("powersgd", {"rank": 1})):
                        c = build(name, seed=0, **kw)
                        for s, g in enumerate(grads):
                            t0 = time.perf_counter()
                            c.encode(g, s)
                            times.setdefault((name, old), []).append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        for name in ("spar", "powersgd"):
            o, n = med[(name, True)], med[(name, False)]
            print(f"{model} {name}: old {o * 1e3:.2f} ms ({mb / o:.0f} MB/s)  new {n * 1e3:.2f} ms "
                  f"({mb / n:.0f} MB/s)  x{o / n:.2f}")
        print(f"{model} spar/powersgd time: old {med[('spar', True)] / med[('powersgd', True)]:.2f}  "
              f"new {med[('spar', False)] / med[('powersgd', False)]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
