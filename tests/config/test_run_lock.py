"""Two processes never run the same run id at once (a sweep's jobs sharing an out_dir): the run
holds an flock on ``<run_id>.lock`` beside its folder; a second claim is skipped, and a live run
is never taken for a killed one and moved aside."""
from __future__ import annotations

import os

from harness.compose import compose_config
from harness.run import _claim, run_one
from harness.scenario import merge_overrides, planned


def test_a_claimed_run_id_cannot_be_claimed_again_until_released(tmp_path):
    run_dir = tmp_path / "scenario" / "v-s0-abcd"
    first = _claim(run_dir)
    assert first is not None and run_dir.with_name(".v-s0-abcd.lock").is_file()
    assert _claim(run_dir) is None                 # another open file description: refused
    os.close(first)
    again = _claim(run_dir)
    assert again is not None
    os.close(again)


def test_a_run_held_by_another_process_is_skipped_and_left_alone(tmp_path):
    base = ["scenario=smoke_hilo", f"out_dir={tmp_path}", "progress=false"]
    cfg = compose_config(merge_overrides(base, list(compose_config(base).variants["full_sync"])))
    run = planned(cfg, "smoke_hilo", "full_sync")
    run_dir = run.run_dir
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text('{"status": "running"}')     # a live run's folder
    held = _claim(run_dir)
    try:
        outcome = run_one(run, "python -m harness " + " ".join(base))
    finally:
        os.close(held)
    assert outcome.status == "skipped" and outcome.reason == "running in another process"
    assert (run_dir / "run.json").read_text() == '{"status": "running"}'
    assert not list(run_dir.parent.glob("*.attempt*"))
