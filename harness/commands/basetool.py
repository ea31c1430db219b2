"""The command line of the shipped reference bases (harness.tasks.bases is the library).

    python -m harness.commands.basetool verify            files and weights against MANIFEST.json
    python -m harness.commands.basetool rebuild           pretrain every shipped recipe again, compare hashes
    python -m harness.commands.basetool ship DIR [DIR..]  copy cache entries in and write the manifest

Kept apart from the library because rebuilding needs the pretraining cache, which itself
loads shipped bases through harness.tasks.bases (no import cycle).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Mapping

import torch

from harness.tasks.bases import BASES_DIR, dir_weights_sha256, manifest, ship, verify

def configs_of(recipe: Mapping) -> tuple[dict, dict]:
    """(model_cfg, task_cfg) that give ``recipe`` back (``cache.recipe``): to rebuild an entry."""
    student = recipe["kind"] == "student"
    teacher = recipe.get("teacher", recipe if not student else {"steps": 0, "lr": 3e-3})
    model = {**recipe["model"], "dtype": "float32"}
    task = {"digits": recipe["digits"], "ops": list(recipe["ops"]), "reverse": recipe["reverse"],
            "pretrain_batch": recipe["batch"], "teacher_steps": teacher["steps"], "pretrain_lr": teacher["lr"],
            "pretrain_seed": recipe["seed"] - (1 if student else 0),
            "student_steps": 0, "student_naive_frac": 0.0, "student_lr": 1e-3, "student_init": "teacher"}
    if student:
        task.update(student_steps=recipe["steps"], student_naive_frac=recipe["naive_frac"],
                    student_lr=recipe["lr"], student_init=recipe["init"])
    return model, task


def rebuild(root: Path = BASES_DIR, threads: int | None = None) -> list[dict]:
    """Pretrain every shipped recipe again (teachers first) in a temporary folder; per entry
    the rebuilt and the reference weights_sha256 and whether they match."""
    from harness.tasks import cache

    if threads:
        torch.set_num_threads(threads)
    entries = manifest(root)["entries"]
    out = []
    for name in sorted(entries, key=lambda n: (entries[n]["kind"] != "teacher", n)):
        recipe = entries[name]["recipe"]
        model, task = configs_of(recipe)
        if cache.recipe(recipe["kind"], model, task) != recipe:
            raise RuntimeError(f"{name}: could not reconstruct its configs from the recipe in the manifest")
        with tempfile.TemporaryDirectory(prefix=f"nb-rebuild-{name}-") as tmp:
            folder = Path(tmp) / name
            cache._build(recipe["kind"], model, task, folder, progress=True)
            sha = dir_weights_sha256(folder)
            acc = json.loads((folder / "meta.json").read_text())["accuracy"]
        ref = entries[name]["weights_sha256"]
        out.append({"entry": name, "rebuilt_sha256": sha, "reference_sha256": ref, "match": sha == ref,
                    "rebuilt_accuracy": acc, "reference_accuracy": entries[name].get("accuracy"),
                    "threads": torch.get_num_threads()})
        print(json.dumps(out[-1]), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.commands.basetool", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("verify", help="shipped files and weights against MANIFEST.json")
    rb = sub.add_parser("rebuild", help="pretrain every shipped recipe again and compare hashes")
    rb.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    sp = sub.add_parser("ship", help="copy cache entries in and write the manifest")
    sp.add_argument("dirs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "verify":
        problems = verify()
        for p in problems:
            print(p)
        print("ok: every shipped base matches MANIFEST.json" if not problems else f"{len(problems)} mismatches")
        return 1 if problems else 0
    if args.cmd == "ship":
        data = ship(args.dirs)
        print(f"shipped {len(data['entries'])} entries into {BASES_DIR}")
        return 0
    results = rebuild(threads=args.threads)
    same = [r["entry"] for r in results if r["match"]]
    print(f"{len(same)}/{len(results)} rebuilt bases are bit-identical to the shipped ones: {', '.join(same) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
