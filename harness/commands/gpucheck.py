"""``make gpu-check``: smoke_hilo and smoke_spra with every role on its own GPU, over the shaped links.

    python -m harness.commands.gpucheck [--out results/gpucheck/runs]

Runs ``scenario=smoke_hilo only=[hilo_spar]`` and ``scenario=smoke_spra only=[spra]`` at seed 0
with ``model.device=auto`` (harness/placement.py gives the i-th role of the host GPU i mod G, its
own when G >= roles), gloo over the kernel-shaped links as always, then prints per run and role
the device the role's rows say it used, the payload bytes per update, and the time of a
device-to-host copy of that many bytes on each GPU used (median of 20 copies, torch.cuda
events; measured here, beside the runs, since the roles' encoders copy inside their encode).
Without a GPU it says why and exits 0 having run nothing. Under 5 minutes on one GPU host.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

RUNS = (("smoke_hilo", "hilo_spar"), ("smoke_spra", "spra"))
TIMEOUT_S = 280


def gpu_missing() -> str:
    """Why there is no GPU to check ("" when there is one)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}, but no device visible"
        return f"torch {torch.__version__} sees no GPU ({build})"
    return ""


def copy_ms(device: str, nbytes: int, repeats: int = 20) -> float:
    """Median milliseconds of one device-to-host copy of ``nbytes`` on ``device``."""
    import torch

    src = torch.empty(max(1, nbytes), dtype=torch.uint8, device=device)
    dst = torch.empty(src.shape, dtype=torch.uint8, pin_memory=True)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src, non_blocking=True)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.commands.gpucheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/gpucheck/runs", help="out_dir of the two runs")
    args = parser.parse_args(argv)
    missing = gpu_missing()
    if missing:
        print(f"gpu-check: skipped, {missing}; run it on a host with a GPU (and torch's CUDA build in .venv)")
        return 0
    from harness.record import read_rows, read_run_json

    failed = 0
    t0 = time.monotonic()
    for scenario, variant in RUNS:
        cmd = [sys.executable, "-m", "harness", f"scenario={scenario}", f"only=[{variant}]", "seed=0",
               "model.device=auto", f"out_dir={args.out}", "progress=false"]
        print("gpu-check: " + " ".join(cmd[1:]), flush=True)
        done = subprocess.run(cmd, timeout=TIMEOUT_S)
        runs = sorted(Path(args.out, scenario).glob(f"{variant}-s0-*"), key=lambda p: p.stat().st_mtime)
        if done.returncode != 0 or not runs:
            print(f"gpu-check: {scenario}/{variant} failed (exit {done.returncode})")
            failed += 1
            continue
        run = runs[-1]
        rows, meta = read_rows(run), read_run_json(run)
        print(f"gpu-check: {scenario}/{variant}: {meta.get('status')}, backend {meta.get('backend')}, "
              f"placement gpu_shared={meta.get('placement', {}).get('gpu_shared')}")
        hub = rows[rows["role"].isin(["learner", "server"])]
        nbytes = int(hub["payload_bytes_down"].dropna().mean()) if "payload_bytes_down" in hub else 0
        for role, group in rows.groupby("role"):
            device = ",".join(sorted(set(map(str, group.get("device", ["?"])))))
            line = f"  {role:<10} device {device:<8}"
            if device.startswith("cuda"):
                line += f" device-to-host copy of {nbytes} B: {copy_ms(device, nbytes):.3f} ms (median of 20)"
            print(line, flush=True)
    print(f"gpu-check: {len(RUNS) - failed}/{len(RUNS)} runs ok in {time.monotonic() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
