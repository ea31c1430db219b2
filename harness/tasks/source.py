"""Where a run's base models come from, decided once at plan time (``RunPlan.model_source``).

A run loads one or two bases: the student (the policy / every federated party) and, for
``task=distill``, the teacher. Each comes from one of four origins:

- ``shipped``: a reference base shipped with the project (harness/bases/<entry>; the same
  bits on every machine), when the preset's pretraining recipe is one of them;
- ``cache``: pretrained on first use into the cache (<cache>/<kind>-<recipe hash>; built by
  rank 0 of the run: harness.tasks.cache.ensure_pretrained);
- ``folder``: ``model=hf``, a local Hugging Face folder, used as it is;
- ``gguf``: ``model=hf`` with a GGUF file, materialised into <cache>/gguf-<file hash>
  (harness.tasks.gguf_cache) once, before the first launch that needs it (``materialise``, called
  by run_one and harness.tune), so the roles load a folder;
- ``derived``: the student of a chat distillation (``task=chat_distill``, ``model=hf`` with no
  ``model.teacher_path``): the teacher (``model.path``) with every decoder linear weight rounded to
  ``task.chat.student_bits`` bits per group of ``task.chat.student_group``
  (harness.tasks.chat_student), built once into <cache>/chat-student-<hash of the teacher's
  identity, bits, group> by ``materialise`` after the teacher. With ``model.teacher_path`` set, the
  student is ``model.path`` as given (a pair the user built).

``resolve(model_cfg, task_cfg)`` decides it (one-line ConfigError on a missing package, file or
folder, or an architecture transformers cannot dequantize: the GGUF's metadata is read, no tensor
is dequantized, so planning stays fast); ``ModelSource.describe()`` is
run.json's ``bases``: per kind the SHA-256 of the weights it loads, whether that is the shipped
reference's, its path and origin, and for a GGUF the source file and its SHA-256.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Mapping

KINDS = ("student", "teacher")


class Origin(str, Enum):
    """Where one base's weights come from (a closed set)."""
    SHIPPED = "shipped"
    CACHE = "cache"
    FOLDER = "folder"
    GGUF = "gguf"
    DERIVED = "derived"


@dataclass(frozen=True)
class BaseSource:
    """One base of a run: which (student | teacher), from where, and the folder the roles load."""
    kind: str                          # student | teacher
    origin: Origin
    path: str                          # the local HF folder loaded (an origin=cache entry may not exist yet)
    entry: str | None = None           # shipped/cache: <kind>-<recipe hash>; gguf: gguf-<file hash>
    gguf: str | None = None            # origin=gguf: the source file
    gguf_sha256: str | None = None     # origin=gguf: SHA-256 of the file's bytes
    derived_from: str | None = None    # origin=derived: the teacher folder the student is rounded from
    student_bits: int | None = None    # origin=derived: bits per weight
    student_group: int | None = None   # origin=derived: weights per quantisation group

    def describe(self) -> dict[str, Any]:
        """run.json's ``bases[kind]`` (the weights are hashed now, from the folder the roles loaded)."""
        from harness.tasks.bases import describe

        path = Path(self.path)
        ref_name = self.entry if self.origin in (Origin.SHIPPED, Origin.CACHE) else None
        out = describe(path, ref_name) if path.is_dir() else {"sha256": None, "reference": False, "path": self.path}
        out["origin"] = self.origin.value
        if self.origin is Origin.GGUF:
            out |= {"gguf": self.gguf, "gguf_sha256": self.gguf_sha256}
        if self.origin is Origin.DERIVED:
            out |= {"derived_from": self.derived_from, "student_bits": self.student_bits,
                    "student_group": self.student_group}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "origin": self.origin.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "BaseSource":
        return cls(**{**dict(data), "origin": Origin(data["origin"])})


@dataclass(frozen=True)
class ModelSource:
    """Every base a run loads, student first."""
    bases: tuple[BaseSource, ...]

    def of(self, kind: str) -> BaseSource:
        for b in self.bases:
            if b.kind == kind:
                return b
        raise KeyError(f"this run loads no {kind} base (it loads {', '.join(b.kind for b in self.bases)})")

    @property
    def kinds(self) -> list[str]:
        return [b.kind for b in self.bases]

    def describe(self) -> dict[str, dict[str, Any]]:
        """run.json's ``bases``: {kind: BaseSource.describe()}."""
        return {b.kind: b.describe() for b in self.bases}

    def to_dict(self) -> dict[str, Any]:
        return {"bases": [b.to_dict() for b in self.bases]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelSource":
        return cls(tuple(BaseSource.from_dict(b) for b in data["bases"]))


def used_kinds(task_cfg: Any) -> list[str]:
    """The bases a run loads: the student, and the teacher for distill."""
    from harness.tasks.plans import task_plan

    return ["student"] + (["teacher"] if task_plan(task_cfg).name == "distill" else [])


def derives_student(model_cfg: Any, task_cfg: Any) -> bool:
    """A chat distillation on ``model=hf`` without ``model.teacher_path``: its student is derived."""
    from harness.tasks.plans import model_plan, task_plan

    m, t = model_plan(model_cfg), task_plan(task_cfg)
    return m.name == "hf" and t.format == "chat" and t.name == "distill" and not m.teacher_path


def base_source(kind: str, model_cfg: Any, task_cfg: Any) -> BaseSource:
    """Where the ``kind`` base comes from. A GGUF is hashed and its metadata checked here; it is
    materialised (dequantized into the cache) by ``materialise``, not here; likewise a derived student."""
    from harness.tasks.models import hf_key
    from harness.tasks.plans import model_plan, task_plan

    if kind not in KINDS:
        raise ValueError(f"kind: {kind!r} is not allowed; choose teacher or student")
    m = model_plan(model_cfg)
    if kind == "student" and derives_student(model_cfg, task_cfg):
        from harness.tasks.bases import dir_weights_sha256
        from harness.tasks.chat_student import student_path

        teacher = base_source("teacher", model_cfg, task_cfg)
        chat = task_plan(task_cfg).chat
        bits, group = int(chat.student_bits), int(chat.student_group)
        identity = teacher.gguf_sha256 or dir_weights_sha256(Path(teacher.path))
        path = student_path(identity, bits, group)
        return BaseSource(kind, Origin.DERIVED, str(path), path.name, derived_from=teacher.path, student_bits=bits,
                          student_group=group)
    if m.name == "hf":
        from harness.tasks.gguf_cache import check, entry_of, is_gguf
        from harness.tasks.models import hf_dir

        key = hf_key(m, kind)
        if is_gguf(getattr(m, key)):
            entry = entry_of(str(getattr(m, key)), f"model.{key}")
            if not entry.ready:
                check(entry.file, f"model.{key}")     # the architecture and tokenizer, from the metadata alone
            return BaseSource(kind, Origin.GGUF, str(entry.path), entry.path.name, str(entry.file), entry.sha256)
        return BaseSource(kind, Origin.FOLDER, str(hf_dir(m, key)))
    from harness.tasks.bases import shipped
    from harness.tasks.recipes import entry_name, entry_path

    name = entry_name(kind, m, task_cfg)
    ref = shipped(name)
    if ref is not None:
        return BaseSource(kind, Origin.SHIPPED, str(ref), name)
    return BaseSource(kind, Origin.CACHE, str(entry_path(kind, m, task_cfg)), name)


def resolve(model_cfg: Any, task_cfg: Any) -> ModelSource:
    """The ModelSource of a run's model and task config (see the module docstring)."""
    return ModelSource(tuple(base_source(k, model_cfg, task_cfg) for k in used_kinds(task_cfg)))


def materialise(source: ModelSource | None, progress: bool = True) -> None:
    """Dequantize every GGUF base of ``source`` that is not in the cache yet (file-locked: once per
    machine however many callers). A file transformers cannot load is a one-line ConfigError."""
    from harness.tasks.gguf_cache import materialise as one

    bases = source.bases if source is not None else ()
    for b in bases:
        if b.origin is Origin.GGUF and not (Path(b.path) / "meta.json").is_file():
            one(str(b.gguf), "model.path" if b.kind == "student" else "model.teacher_path", progress=progress)
    for b in bases:                        # after the teacher it is rounded from
        if b.origin is Origin.DERIVED and not (Path(b.path) / "meta.json").is_file():
            from harness.tasks.chat_student import build_student

            build_student(Path(str(b.derived_from)), Path(b.path), int(b.student_bits or 0), int(b.student_group or 0))
