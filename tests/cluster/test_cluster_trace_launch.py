"""Launched roles on a traced link: the tc backend's transfers take the time the trace's rate
integrated from each send predicts (Transfer.ideal_s), and the model backend reports exactly that.

The hub sends 3 MB to w0 through w0's downlink, whose trace loops 20 Mbit/s for 2 s, 4 Mbit/s
for 2 s (so a transfer of ~2 s crosses steps wherever it starts). ideal_s counts payload bytes;
tbf meters Ethernet frames, so the tc prediction is ideal_s x 1514/1448 (TCP/IPv4 framing, as
the userspace pacer charges). A shaper caps: no repeat may be more than 10% faster than that, timed
from the hub's start to the receiver's arrival (the receiver's own seconds start when it posts the
receive, which on a loaded machine can come after the first bytes are under way: measured 0.87 of the
prediction beside a real-model job); a loaded machine can be slower, so the 10% bound above is held by
the best repeat of the receiver's seconds.
"""
from __future__ import annotations

import pytest

from cluster_helpers import outputs, star
from harness.cluster.launch import launch
from harness.wire.links import FRAME_BYTES, SEGMENT_BYTES
from netem.spec import LinkSpec
from netem.trace import traced

NBYTES, REPEATS = 3_000_000, 3
TRACE = "t_s,rate_mbit\n0,20\n2,4\n4,loop\n"


def _run(tmp_path, backend: str) -> tuple[object, list[dict]]:
    path = tmp_path / "steps.csv"
    path.write_text(TRACE)
    roles = star(1, down=traced(LinkSpec(), str(path)))
    cfg = {"seed": 1, "selftest": {"phases": ["probe"],
                                   "probes": [{"op": "send", "nbytes": NBYTES, "repeat": REPEATS, "dst": 1}]}}
    result = launch(roles, "harness.commands.cluster_selftest:main", {"cfg": cfg, "keys": {"run_id": "t", "scenario": "trace"}},
                    backend=backend, run_dir=tmp_path / "run", hang_timeout_s=120, progress=False, seed=cfg["seed"])
    assert (result.status, result.reason) == ("ok", ""), result.reason
    records = outputs(tmp_path / "run", "probe")["records"]
    assert len(records) == REPEATS and all(r["intact"] for r in records)
    return result, records


@pytest.mark.emulated
@pytest.mark.e2e
def test_kernel_transfer_takes_the_trace_integral(kernel_backend, tmp_path):
    result, records = _run(tmp_path, kernel_backend)      # tc here (netem where the kernel has it)
    replay = result.topology["replay"]
    assert replay["changes"] >= 1 and not replay["errors"], replay
    framing = FRAME_BYTES / SEGMENT_BYTES
    ratios = [r["seconds"] / (r["ideal_s"] * framing) for r in records]
    whole = [r["from_start_s"] / (r["ideal_s"] * framing) for r in records]
    print(f"{kernel_backend} traced send of {NBYTES} B: seconds {[round(r['seconds'], 3) for r in records]}, ideal "
          f"{[round(r['ideal_s'], 3) for r in records]} (x{framing:.4f} framing): ratios {[round(x, 3) for x in ratios]}; "
          f"from the hub's start {[round(x, 3) for x in whole]}; replay {replay}")
    assert all(NBYTES * 8 / 20e6 <= r["ideal_s"] <= NBYTES * 8 / 4e6 for r in records)
    assert min(whole) >= 0.9, f"faster than the trace allows: {whole}"
    assert min(ratios) <= 1.1, f"every repeat slower than the trace by > 10%: {ratios}"


@pytest.mark.e2e
def test_model_transfer_is_the_trace_integral(tmp_path):
    _, records = _run(tmp_path, "model")
    for r in records:
        assert r["seconds"] == pytest.approx(r["ideal_s"])
        assert NBYTES * 8 / 20e6 <= r["ideal_s"] <= NBYTES * 8 / 4e6
