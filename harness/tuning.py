"""Committed learning-rate tuning: the files harness.tune writes and scenarios read.

``results/tuning/<scenario>.csv`` holds every sweep point (variant, optimizer, lr, seed,
rounds, val_loss, val_accuracy: the final evaluation on the VALIDATION split,
``task.eval_split=validation``, never the held-out test problems).
``results/tuning/<scenario>.selected.csv`` holds per variant the selected lr (lowest mean
val_loss over the seeds), its mean loss and accuracy, the seeds, the grid's ends and
whether the selected value is at an edge (it must not be: harness.tune extends the grid).

A scenario reads its learning rates from the selected file through the OmegaConf resolver
``${tuned_lr:SCENARIO,VARIANT}`` (registered with the config schema), e.g.
``spra: [method=spra, "federated.lr=${tuned_lr:spra_federated,spra}"]``: the values are
never copied by hand, and a missing file or variant is a ConfigError that names the
command producing it.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import ConfigError
from harness.paths import results_root

POINT_COLUMNS = ["variant", "optimizer", "lr", "seed", "rounds", "val_loss", "val_accuracy"]
if TYPE_CHECKING:                        # pandas only when a file is read (the resolver is registered with the schema)
    import pandas as pd

SELECTED_COLUMNS = ["variant", "optimizer", "lr", "val_loss", "val_accuracy", "seeds", "grid_min", "grid_max",
                    "grid_points", "at_edge"]


def tuning_dir(root: Path | None = None) -> Path:
    return (root or results_root()) / "tuning"


def points_path(scenario: str, root: Path | None = None) -> Path:
    return tuning_dir(root) / f"{scenario}.csv"


def selected_path(scenario: str, root: Path | None = None) -> Path:
    return tuning_dir(root) / f"{scenario}.selected.csv"


def select(points: "pd.DataFrame") -> "pd.DataFrame":
    """Per variant: the lr with the lowest mean val_loss over seeds, and whether it is a grid edge."""
    import pandas as pd

    rows = []
    for variant, group in points.groupby("variant", sort=False):
        means = group.groupby("lr").agg(val_loss=("val_loss", "mean"), val_accuracy=("val_accuracy", "mean"),
                                        seeds=("seed", "nunique"))
        best = float(means["val_loss"].idxmin())
        grid = sorted(means.index.astype(float))
        rows.append({"variant": variant, "optimizer": str(group["optimizer"].iloc[0]), "lr": best,
                     "val_loss": float(means.loc[best, "val_loss"]),
                     "val_accuracy": float(means.loc[best, "val_accuracy"]), "seeds": int(means.loc[best, "seeds"]),
                     "grid_min": grid[0], "grid_max": grid[-1], "grid_points": len(grid),
                     "at_edge": bool(best in (grid[0], grid[-1]))})
    return pd.DataFrame(rows, columns=SELECTED_COLUMNS)


def read_selected(scenario: str, root: Path | None = None) -> "pd.DataFrame":
    import pandas as pd

    path = selected_path(scenario, root)
    if not path.exists():
        raise ConfigError(f"federated.lr: no tuning file {path}; run `python -m harness.tune scenario={scenario}`")
    return pd.read_csv(path)


def tuned_lr(scenario: str, variant: str) -> float:
    """The selected learning rate of ``variant`` in ``scenario``'s committed tuning file."""
    table = read_selected(str(scenario))
    hit = table[table["variant"] == str(variant)]
    if hit.empty:
        raise ConfigError(f"federated.lr: variant {variant!r} is not in {selected_path(str(scenario))}; run "
                          f"`python -m harness.tune scenario={scenario} only=[{variant}]`")
    return float(hit["lr"].iloc[0])


def register_resolver() -> None:
    """Register ``${tuned_lr:SCENARIO,VARIANT}`` once per process."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("tuned_lr"):
        OmegaConf.register_new_resolver("tuned_lr", tuned_lr)
