"""A chat distillation on model=hf without model.teacher_path: the plan names a derived student (the
teacher rounded to task.chat.student_bits per task.chat.student_group), materialise builds it once, and
run.json's bases say what it was derived from; with teacher_path set, model.path is the student as given."""
from __future__ import annotations

import torch

from chat_model import save_chat_model
from harness.tasks.source import Origin, materialise, resolve


def _cfgs(folder, **model):
    m = {"name": "hf", "path": str(folder), "teacher_path": None, **model}
    t = {"name": "distill", "format": "chat", "chat": {"student_bits": 2, "student_group": 8}}
    return m, t


def test_the_student_is_derived_from_the_teacher_and_built_once(tmp_path, monkeypatch):
    from harness.tasks.models import load_dir

    monkeypatch.setenv("NARROWBAND_CACHE", str(tmp_path / "cache"))
    folder = save_chat_model(tmp_path / "teacher", seed=4)
    source = resolve(*_cfgs(folder))
    student, teacher = source.of("student"), source.of("teacher")
    assert student.origin is Origin.DERIVED and teacher.origin is Origin.FOLDER
    assert student.derived_from == str(folder) and (student.student_bits, student.student_group) == (2, 8)
    assert resolve(*_cfgs(folder)) == source                         # planning twice: the same place
    materialise(source, progress=False)
    built = load_dir(student.path, torch.float32).state_dict()
    orig = load_dir(teacher.path, torch.float32).state_dict()
    q = next(k for k in built if k.endswith("q_proj.weight"))
    assert not torch.equal(built[q], orig[q])                        # rounded ...
    assert len(torch.unique(built[q].reshape(-1, 8)[0])) <= 4        # ... to 2 bits per group of 8
    stamp = (tmp_path / "cache").stat().st_mtime_ns
    materialise(source, progress=False)                              # built once
    assert (tmp_path / "cache").stat().st_mtime_ns == stamp
    described = source.describe()["student"]
    assert described["origin"] == "derived" and described["derived_from"] == str(folder) and described["sha256"]


def test_an_explicit_teacher_keeps_model_path_as_the_student(tmp_path):
    a, b = save_chat_model(tmp_path / "a", seed=1), save_chat_model(tmp_path / "b", seed=2)
    source = resolve(*_cfgs(a, teacher_path=str(b)))
    assert source.of("student").origin is Origin.FOLDER and source.of("student").path == str(a)
    assert source.of("teacher").path == str(b)
