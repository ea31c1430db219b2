"""The pretraining cache: content-addressed, a hit the second time, one build under a race."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import harness.tasks.cache as cache
from harness.tasks import load_base, pretrained
from harness.errors import ConfigError


def test_build_then_hit(model_cfg, task_cfg, cache_dir, monkeypatch):
    path = pretrained("student", model_cfg, task_cfg, progress=False)
    assert path.parent == cache_dir and path.name.startswith("student-")
    assert {"config.json", "meta.json", "tokenizer.json"} <= {p.name for p in path.iterdir()}
    meta = json.loads((path / "meta.json").read_text())
    assert meta["recipe"]["steps"] == 2 and 0.0 <= meta["accuracy"] <= 1.0
    assert meta["recipe"]["init"] == "teacher" and (cache_dir / "meta.json").exists() is False
    assert cache.entry_path("teacher", model_cfg, task_cfg).is_dir()      # built on the way

    def no_build(*args, **kwargs):
        raise AssertionError("a cached entry was rebuilt")
    monkeypatch.setattr(cache, "_build", no_build)
    assert pretrained("student", model_cfg, task_cfg) == path
    model = load_base("student", model_cfg, task_cfg)
    assert not model.training and not any(p.requires_grad for p in model.parameters())


def test_key_follows_the_recipe(model_cfg, task_cfg):
    key = cache.entry_path("teacher", model_cfg, task_cfg)
    assert cache.entry_path("teacher", model_cfg, task_cfg) == key
    assert cache.entry_path("teacher", model_cfg, {**task_cfg, "teacher_steps": 5}) != key
    assert cache.entry_path("teacher", {**model_cfg, "hidden_size": 64}, task_cfg) != key
    assert cache.entry_path("student", model_cfg, task_cfg) != key
    # knobs of post-training do not touch the pretrained entries
    assert cache.entry_path("teacher", {**model_cfg, "rank": 8}, {**task_cfg, "temperature": 0.5}) == key
    with pytest.raises(ValueError, match="kind"):
        cache.entry_path("critic", model_cfg, task_cfg)
    # the student starts from the teacher, so the teacher's recipe is part of its key
    student = cache.entry_path("student", model_cfg, task_cfg)
    assert cache.entry_path("student", model_cfg, {**task_cfg, "teacher_steps": 5}) != student
    scratch = {**task_cfg, "student_init": "scratch"}
    assert cache.entry_path("student", model_cfg, {**scratch, "teacher_steps": 5}) == \
           cache.entry_path("student", model_cfg, scratch)
    with pytest.raises(ConfigError, match="task.student_init: 'nowhere'"):
        cache.entry_path("student", model_cfg, {**task_cfg, "student_init": "nowhere"})


def test_hf_models_are_not_built(tmp_path, model_cfg, task_cfg):
    from harness.tasks import build_model, build_tokenizer
    tok = build_tokenizer(model_cfg)
    build_model(model_cfg, tok.vocab_size).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    hf = {"name": "hf", "path": str(tmp_path), "teacher_path": None, "dtype": "float32"}
    assert pretrained("student", hf, task_cfg) == tmp_path == pretrained("teacher", hf, task_cfg)
    assert load_base("teacher", hf, task_cfg).config.hidden_size == model_cfg["hidden_size"]


RACER = textwrap.dedent("""
    import json, os, sys, time
    import harness.tasks.cache as cache
    real = cache._build
    def slow_build(*args, **kwargs):
        with open(sys.argv[3], "a") as log:
            log.write(f"{os.getpid()}\\n")
        time.sleep(1.0)
        return real(*args, **kwargs)
    cache._build = slow_build
    print(cache.pretrained("teacher", json.loads(sys.argv[1]), json.loads(sys.argv[2]), progress=False))
""")


@pytest.mark.slow
def test_two_processes_build_once(model_cfg, task_cfg, tmp_path):
    env = {**os.environ, "NARROWBAND_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    log = tmp_path / "builds.log"
    args = [sys.executable, "-c", RACER, json.dumps(model_cfg), json.dumps(task_cfg), str(log)]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    paths = {o[0].strip().splitlines()[-1] for o in outs}
    assert len(paths) == 1
    assert len(log.read_text().split()) == 1                    # built once
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")) == \
           [Path(paths.pop()).name]                             # no temporary folder left behind


def test_an_entry_without_its_model_files_is_never_marked_complete(model_cfg, task_cfg, tmp_path, monkeypatch):
    """transformers' save_pretrained writes nothing on a non-zero torch.distributed rank."""
    from transformers import PreTrainedModel

    monkeypatch.setenv("NARROWBAND_CACHE", str(tmp_path))
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", lambda self, *a, **k: None)
    with pytest.raises(RuntimeError, match="wrote no config.json"):
        pretrained("teacher", model_cfg, task_cfg, progress=False)
    assert not list(tmp_path.glob("*/meta.json")) and not list(tmp_path.glob(".tmp-*"))
