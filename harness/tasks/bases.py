"""Reference bases shipped with the project: the same pretrained weights on every machine.

The reference scenarios (hilo_distill, hilo_reward, spra_federated, grid_hilo, smoke_*)
start from a pretrained teacher and student of the tiny model. Pretraining them on another
CPU (or with another thread count) gives other bits, and one run's quality moved by 13
points with the base. So the entries those scenarios use are shipped as package data:

    harness/bases/<kind>-<recipe hash>/   config.json, model.safetensors, tokenizer files, meta.json
    harness/bases/MANIFEST.json           per entry: kind, recipe, weights_sha256, files {name: sha256}

The folder name is exactly the cache entry name (``harness.tasks.cache.entry_name``): the
loader (``cache.pretrained``) returns the shipped folder whenever the recipe matches one, and
uses the cache only for other recipes. ``NARROWBAND_SHIPPED_BASES=0`` makes it ignore the
shipped folders (to rebuild a reference recipe into the cache on purpose); the run then
records ``reference: false`` and its summary names the base as rebuilt with another hash.

Hashes: ``files`` are SHA-256 of each file's bytes; ``weights_sha256`` is the SHA-256 of the
weights themselves (``weights_sha256``: every tensor in name order, with its name, dtype and
shape), so it can be computed from a loaded model's ``state_dict()`` as well as from the
file, and a run records the hash of the weights it started from.

Command line (the recipe to rebuild them stays in each meta.json):
    python -m harness.commands.basetool verify            files and weights against MANIFEST.json
    python -m harness.commands.basetool rebuild           pretrain every shipped recipe again into a
                                                    temporary folder and say which hashes match
    python -m harness.commands.basetool ship DIR [DIR..]  copy cache entries in and write the manifest
A rebuilt student starts from the shipped teacher (its recipe's init), so each comparison
checks one pretraining, not two.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Mapping

import torch

BASES_DIR = Path(__file__).resolve().parents[1] / "bases"
MANIFEST_NAME = "MANIFEST.json"
SHIPPED_ENV = "NARROWBAND_SHIPPED_BASES"
SHIPPED_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "meta.json")


def weights_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 of a state dict: for each tensor in name order, its name, dtype, shape and bytes."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        h.update(f"{name}\0{str(t.dtype).removeprefix('torch.')}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def dir_weights_sha256(path: Path) -> str:
    """``weights_sha256`` of the safetensors weights of a model directory (all shards)."""
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path}: no *.safetensors weights to hash")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return weights_sha256(state)


def manifest(root: Path = BASES_DIR) -> dict:
    """MANIFEST.json ({"entries": {name: {...}}}); empty when nothing is shipped."""
    path = root / MANIFEST_NAME
    return json.loads(path.read_text()) if path.is_file() else {"entries": {}}


def shipped(name: str, root: Path = BASES_DIR) -> Path | None:
    """The shipped folder of cache entry ``name`` ("student-<hash>"), or None (not shipped, or
    ``NARROWBAND_SHIPPED_BASES=0``)."""
    if os.environ.get(SHIPPED_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    entry = root / name
    if name in manifest(root)["entries"] and (entry / "meta.json").is_file():
        return entry
    return None


def describe(path: Path, name: str | None, root: Path = BASES_DIR) -> dict:
    """What run.json records of one base: sha256 of its weights, whether that is the shipped
    reference's, its path, and the reference's hash where the recipe has one."""
    sha = dir_weights_sha256(path)
    ref = manifest(root)["entries"].get(name or "", {}).get("weights_sha256")
    out = {"sha256": sha, "reference": ref is not None and sha == ref, "path": str(path)}
    if ref is not None:
        out["reference_sha256"] = ref
    return out


def summary_note(bases: Mapping[str, Mapping]) -> str:
    """One line naming every base whose recipe has a reference but whose weights differ."""
    off = [f"{kind} base rebuilt: sha256 {b['sha256'][:12]} differs from the reference "
           f"{b['reference_sha256'][:12]} ({b['path']})"
           for kind, b in bases.items() if b.get("reference_sha256") and not b.get("reference")]
    return "; ".join(off)


def verify(root: Path = BASES_DIR) -> list[str]:
    """Every mismatch between the shipped files and MANIFEST.json (empty: all good)."""
    problems = []
    for name, entry in manifest(root)["entries"].items():
        folder = root / name
        for fname, sha in entry["files"].items():
            if not (folder / fname).is_file():
                problems.append(f"{name}/{fname}: missing")
            elif file_sha256(folder / fname) != sha:
                problems.append(f"{name}/{fname}: sha256 differs from the manifest")
        if (folder / "model.safetensors").is_file() and dir_weights_sha256(folder) != entry["weights_sha256"]:
            problems.append(f"{name}: weights_sha256 differs from the manifest")
    return problems


def ship(entries: list[Path], root: Path = BASES_DIR) -> dict:
    """Copy cache entries into ``root`` and (re)write the manifest; returns it."""
    data = manifest(root)
    for src in entries:
        src = Path(src)
        meta = json.loads((src / "meta.json").read_text())
        dst = root / src.name
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir(parents=True)
        files = {}
        for fname in SHIPPED_FILES:
            if (src / fname).is_file():
                shutil.copyfile(src / fname, dst / fname)
                files[fname] = file_sha256(dst / fname)
        data["entries"][src.name] = {"kind": meta["recipe"]["kind"], "recipe": meta["recipe"],
                                     "accuracy": meta.get("accuracy"), "weights_sha256": dir_weights_sha256(dst),
                                     "files": files}
    root.mkdir(parents=True, exist_ok=True)
    (root / MANIFEST_NAME).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data
