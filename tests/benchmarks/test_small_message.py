"""The small-message floor: one small payload's transfer time minus bytes*8/rate.

    .venv/bin/python -m pytest tests/benchmarks/test_small_message.py --benchmark-enable -n 0 -s

One launch on the kernel backend (netem or tc; skipped without root): the hub, unshaped,
sends to two nodes whose downlinks are 10 and 100 mbit, one message at a time, ``REPEAT``
times per size. Sizes: 256 B (an ack, a verdict) and 8.7 kB (a HiLo+Spar update of the tiny
model at a 1.6% budget). Overhead per message = receiver-side seconds (both sides ready ->
last byte delivered) - ideal_s (bytes*8/rate + configured delay, 0 here); the figure is its
median over the repetitions (the machine is shared: the median, not the mean, and the
spread is printed). tbf passes its bucket (4 ms of traffic at the rate, netem/shaping.py)
at line rate, so a message smaller than that can beat bytes*8/rate: a negative overhead
is the shaper's burst, not an error. The issue's target is <= 2 ms; it is reported, never
asserted (tests assert behaviour, not speed): every message arrives intact, and none beats
bytes*8/rate by more than the bucket lets it (BURST_S, 4 ms, + 1 ms of slack): a lower bound on
time, which load cannot break. With benchmarks disabled (the default in pyproject, so in `make
test`) it runs once with 3 messages per size instead of ``REPEAT``.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from harness.cluster.launch import RoleSpec, launch
from netem.shaping import BURST_S
from netem.spec import LinkSpec

RATES_MBIT = (10, 100)
SIZES = (256, 8700)
REPEAT = 25


def measure(backend: str, run_dir: Path, repeat: int = REPEAT) -> dict:
    """One launch; returns {"<rate>mbit/<bytes>B": {overhead_ms (median), p10/p90, min_ms, ideal_ms}}."""
    roles = [RoleSpec("hub", LinkSpec(), LinkSpec())]
    roles += [RoleSpec(f"n{m}mbit", LinkSpec(), LinkSpec(rate_bps=m * 1e6)) for m in RATES_MBIT]
    probes = [{"op": "send", "dst": i + 1, "nbytes": size, "repeat": repeat}
              for i, _ in enumerate(RATES_MBIT) for size in SIZES]
    result = launch(roles, "harness.commands.cluster_selftest:main", {"cfg": {"selftest": {"phases": ["probe"], "probes": probes}}},
                    backend=backend, run_dir=run_dir, hang_timeout_s=120, progress=False)
    assert result.status == "ok", result.reason
    records = json.loads((run_dir / "selftest" / "probe.json").read_text())["records"]
    figures = {}
    for i, m in enumerate(RATES_MBIT):
        for size in SIZES:
            mine = [r for r in records if r["receivers"] == [i + 1] and r["nbytes"] == size]
            assert len(mine) == repeat and all(r["intact"] for r in mine)
            over = sorted((r["seconds"] - r["ideal_s"]) * 1e3 for r in mine)
            figures[f"{m}mbit/{size}B"] = {
                "overhead_ms": round(statistics.median(over), 3),
                "p10_ms": round(over[len(over) // 10], 3), "p90_ms": round(over[(9 * len(over)) // 10], 3),
                "min_ms": round(over[0], 3),
                "ideal_ms": round(mine[0]["ideal_s"] * 1e3, 3), "n": len(over)}
    return figures


@pytest.mark.e2e
def test_small_message_floor(benchmark, tmp_path):
    from netem.caps import probe

    backend = probe().best_backend()
    if backend == "userspace":
        pytest.skip("kernel backends need root and tbf or netem (see `python -m netem check`)")
    repeat = 3 if benchmark.disabled else REPEAT
    benchmark.group = "small-message floor"
    figures = benchmark.pedantic(measure, args=(backend, tmp_path, repeat), rounds=1, iterations=1)
    benchmark.extra_info.update(backend=backend, **figures)
    print(f"\nsmall-message overhead ({backend}; receiver seconds - bytes*8/rate, median of {repeat}):")
    for key, f in figures.items():
        print(f"  {key:>14}: {f['overhead_ms']:+.3f} ms  (p10 {f['p10_ms']:+.3f}, p90 {f['p90_ms']:+.3f}; "
              f"ideal {f['ideal_ms']:.3f} ms)")
    for key, f in figures.items():       # the bucket is the most a message can beat the rate by
        assert f["min_ms"] > -(BURST_S * 1e3 + 1.0), (key, f)
