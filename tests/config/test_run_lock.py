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


def test_a_released_claim_leaves_no_lock_file(tmp_path):
    from harness.run import _release, lock_path

    run_dir = tmp_path / "scenario" / "v-s0-abcd"
    fd = _claim(run_dir)
    assert lock_path(run_dir).is_file()
    _release(fd, run_dir)
    assert not lock_path(run_dir).exists()
    again = _claim(run_dir)                       # and the id can be claimed again
    assert again is not None
    _release(again, run_dir)


def test_a_command_whose_every_run_is_held_elsewhere_says_so_and_exits_75(tmp_path):
    import warm_cli

    from harness.run import HELD_EXIT

    base = ["scenario=smoke_hilo", f"out_dir={tmp_path}", "progress=false", "only=[full_sync]"]
    cfg = compose_config(merge_overrides(base, list(compose_config(base).variants["full_sync"])))
    run_dir = planned(cfg, "smoke_hilo", "full_sync").run_dir
    held = _claim(run_dir)
    try:
        out = warm_cli.run("harness", base, capture_output=True, text=True, timeout=300)
    finally:
        os.close(held)
    assert out.returncode == HELD_EXIT, out.stdout[-2000:] + out.stderr[-2000:]
    assert "nothing ran" in out.stderr and not run_dir.exists()


def test_run_json_gets_the_umask_mode_not_mkstemps_0600(tmp_path):
    from harness.record import write_run_json

    old = os.umask(0o022)
    try:
        write_run_json(tmp_path, {"status": "ok"})
    finally:
        os.umask(old)
    assert (tmp_path / "run.json").stat().st_mode & 0o777 == 0o644


def test_an_attempt_moved_aside_names_its_own_logs_not_the_rerun_s(tmp_path):
    from harness.record import read_run_json, write_run_json
    from harness.run import _prepare_dir

    run_dir = tmp_path / "scenario" / "v-s0-abcd"
    (run_dir / "logs").mkdir(parents=True)
    write_run_json(run_dir, {"status": "failed", "reason": f"role worker1 exited; last lines of {run_dir}/logs/worker1.log"})
    assert _prepare_dir(run_dir, resume=True)
    attempt = run_dir.with_name("v-s0-abcd.attempt1")
    meta = read_run_json(attempt)
    assert meta["status"] == "failed" and meta["reason"].endswith(f"{attempt}/logs/worker1.log"), meta
    assert not run_dir.exists()
