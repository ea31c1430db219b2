"""Shared inputs for the compressor tests: small LoRA-shaped gradients with decaying spectra.

(A uniquely named module, not conftest.py: test folders have no __init__.py, so two conftest
modules would clash in sys.modules.)
"""
from __future__ import annotations

import torch

from harness.compress import REGISTRY

# every compressor the registry found that has a budget (a new one is tested without editing this file)
LOSSY = tuple(name for name, cls in sorted(REGISTRY.items()) if cls.lossy)
# budgets each lossy compressor can reach on `lora_like()` (14.4 kB bf16; the header is ~3% of
# that for 17 small tensors): (0.06, 0.15, 0.4) unless listed; quant's 1-bit codes need ~11%
DEFAULT_BUDGETS = (0.06, 0.15, 0.4)
BUDGETS = {name: DEFAULT_BUDGETS for name in LOSSY} | {"quant": (0.15, 0.3, 0.6)}


def lowrank(m: int, n: int, decay: float, g: torch.Generator) -> torch.Tensor:
    """An m x n matrix with singular values decay**i (a gradient-like, fast-decaying spectrum)."""
    r = min(m, n)
    u, _ = torch.linalg.qr(torch.randn(m, r, generator=g))
    v, _ = torch.linalg.qr(torch.randn(n, r, generator=g))
    s = decay ** torch.arange(r, dtype=torch.float32)
    return (u * s) @ v.T


def lora_like(seed: int = 0, r: int = 8, d: int = 48, ffn: int = 80, layers: int = 2,
              bias: bool = True) -> dict[str, torch.Tensor]:
    """LoRA A-grads (r x d_in) and B-grads (d_out x r) of q/v/up/down over `layers` layers."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for layer in range(layers):
        for mod, (d_out, d_in) in {"q_proj": (d, d), "v_proj": (d, d), "up_proj": (ffn, d),
                                   "down_proj": (d, ffn)}.items():
            scale = float(torch.rand((), generator=g)) + 0.1
            prefix = f"model.layers.{layer}.{mod}"
            out[f"{prefix}.lora_A.weight"] = scale * lowrank(r, d_in, 0.7, g)
            out[f"{prefix}.lora_B.weight"] = scale * lowrank(d_out, r, 0.5, g)
    if bias:
        out["model.norm.bias"] = torch.randn(d, generator=g) * 0.1
    return out


def digest_all(threads: int | None = None) -> dict[str, list[str]]:
    """SHA-256 of the bytes and of the decoded bits of every compressor (with error feedback)
    over three steps of `lora_like` inputs; run in two processes and compared."""
    import hashlib

    from harness.compress import NAMES, Payload, build

    if threads:
        torch.set_num_threads(threads)
    out = {}
    for name in NAMES:
        comp = build(name, seed=5, error_feedback=True, **options(name))
        h_bytes, h_bits = hashlib.sha256(), hashlib.sha256()
        for step in range(3):
            data = comp.encode(lora_like(seed=step), step=step).to_bytes()
            h_bytes.update(data)
            for t in comp.decode(Payload.from_bytes(data)).values():
                h_bits.update(t.numpy().tobytes())
        out[name] = [h_bytes.hexdigest(), h_bits.hexdigest()]
    return out


def options(name: str, budget: float | None = None) -> dict:
    if name == "identity":
        return {"dtype": "fp32"}
    return {"budget": budget if budget is not None else BUDGETS[name][1]}


def rel_error(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    num = sum(float((a[n].double() - b[n].double()).square().sum()) for n in a)
    den = sum(float(a[n].double().square().sum()) for n in a)
    return (num / den) ** 0.5

