"""Committed learning-rate tuning: the files harness.tune writes and scenarios read.

``results/tuning/<scenario>.csv`` holds every sweep point (variant, optimizer, lr, seed,
rounds, val_loss, val_accuracy: the final evaluation on the VALIDATION split,
``task.eval_split=validation``, never the held-out test problems). ``rounds`` is the horizon
of the point: federated rounds, or on-policy updates (``onpolicy.steps``); ``val_loss`` is the
federated SFT loss, the on-policy distillation's reverse KL, or 1 - the reward task's mean
reward; ``variant`` is a tuning entry (an on-policy entry serves every variant that differs
from it only in the link or the horizon, harness.tune).
``results/tuning/<scenario>.selected.csv`` holds per variant the selected lr (federated: the
lowest mean val_loss over the seeds; on-policy: the highest mean val_accuracy, column
``selected_by``), its mean loss and accuracy, the seeds, the grid's ends, the horizon and
whether the selected value is at an edge (it must not be: harness.tune extends the grid).

A scenario reads its learning rates from the selected file through the OmegaConf resolver
``${tuned_lr:SCENARIO,VARIANT}`` (registered with the config schema), e.g.
``spra: [method=spra, "federated.lr=${tuned_lr:spra_federated,spra}"]`` or
``hilo_spar_100mbit: [..., "onpolicy.lr=${tuned_lr:hilo_distill,hilo_spar_10mbit}"]``: the values are
never copied by hand, and a missing file or variant is a ConfigError that names the
command producing it.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import ConfigError
from harness.paths import results_root

POINT_COLUMNS = ["variant", "optimizer", "lr", "seed", "rounds", "val_loss", "val_accuracy"]
if TYPE_CHECKING:                        # pandas only when a file is read (the resolver is registered with the schema)
    import pandas as pd

SELECTED_COLUMNS = ["variant", "optimizer", "lr", "val_loss", "val_accuracy", "seeds", "grid_min", "grid_max",
                    "grid_points", "at_edge", "rounds", "selected_by"]
# what a selection maximises: federated, the validation loss (on a few hundred problems accuracy moves in coarse
# steps); on-policy, the validation accuracy the report's claims judge (on distillation the reverse KL and the
# accuracy can disagree about the lr: results/tuning/hilo_distill.csv, HiLo at 1e-3), ties to the lower loss
SELECT_BY = ("val_loss", "val_accuracy")


def tuning_dir(root: Path | None = None) -> Path:
    return (root or results_root()) / "tuning"


def points_path(scenario: str, root: Path | None = None) -> Path:
    return tuning_dir(root) / f"{scenario}.csv"


def selected_path(scenario: str, root: Path | None = None) -> Path:
    return tuning_dir(root) / f"{scenario}.selected.csv"


def select(points: "pd.DataFrame", by: str = "val_loss") -> "pd.DataFrame":
    """Per variant: the lr with the best mean of ``by`` over seeds (``val_loss``: lowest;
    ``val_accuracy``: highest, ties to the lower mean val_loss), and whether it is a grid edge.
    Only a variant's points at its longest horizon (``rounds``) count: points of another horizon
    (a shorter pilot) never mix into the means."""
    import pandas as pd

    if by not in SELECT_BY:
        raise ConfigError(f"select: {by!r} is not allowed; choose one of {', '.join(SELECT_BY)}")
    rows = []
    for variant, group in points.groupby("variant", sort=False):
        group = group[group["rounds"] == group["rounds"].max()]
        means = group.groupby("lr").agg(val_loss=("val_loss", "mean"), val_accuracy=("val_accuracy", "mean"),
                                        seeds=("seed", "nunique"))
        order = means.sort_values(["val_accuracy", "val_loss"], ascending=[False, True], kind="stable") \
            if by == "val_accuracy" else means.sort_values("val_loss", kind="stable")
        best = float(order.index[0])
        grid = sorted(means.index.astype(float))
        rows.append({"variant": variant, "optimizer": str(group["optimizer"].iloc[0]), "lr": best,
                     "val_loss": float(means.loc[best, "val_loss"]),
                     "val_accuracy": float(means.loc[best, "val_accuracy"]), "seeds": int(means.loc[best, "seeds"]),
                     "grid_min": grid[0], "grid_max": grid[-1], "grid_points": len(grid),
                     "at_edge": bool(best in (grid[0], grid[-1])), "rounds": int(group["rounds"].iloc[0]),
                     "selected_by": by})
    return pd.DataFrame(rows, columns=SELECTED_COLUMNS)


def read_selected(scenario: str, root: Path | None = None) -> "pd.DataFrame":
    import pandas as pd

    path = selected_path(scenario, root)
    if not path.exists():
        raise ConfigError(f"tuned_lr: {scenario!r} has no tuning file {path}; run "
                          f"`python -m harness.tune scenario={scenario}`")
    return pd.read_csv(path)


def tuned_lr(scenario: str, variant: str) -> float:
    """The selected learning rate of ``variant`` in ``scenario``'s committed tuning file."""
    path = selected_path(str(scenario))
    try:
        stat = path.stat()
    except FileNotFoundError:
        read_selected(str(scenario))                         # the ConfigError naming the command
        raise
    lrs = _selected_lrs(str(path), stat.st_mtime_ns, stat.st_size)
    if str(variant) not in lrs:
        raise ConfigError(f"tuned_lr: entry {variant!r} is not in {path}; run "
                          f"`python -m harness.tune scenario={scenario} only=[{variant}]`")
    return lrs[str(variant)]


@functools.lru_cache(maxsize=32)
def _selected_lrs(path: str, mtime_ns: int, size: int) -> dict[str, float]:
    """variant -> lr of one selected file, read once per version of the file (its path, mtime and size key the cache:
    a composed scenario resolves every variant's ${tuned_lr:...}, and a plan each of them again)."""
    import csv

    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    lrs: dict[str, float] = {}
    for row in rows:
        lrs.setdefault(row["variant"], float(row["lr"]))     # the first row of a variant, as the DataFrame lookup took
    return lrs


def config_error_in(err: BaseException) -> ConfigError | None:
    """The ConfigError behind ``err``: itself, or the one a resolver raised (OmegaConf wraps it in
    InterpolationResolutionErrors, chained through __cause__ / __context__), else None."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, ConfigError):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def register_resolver() -> None:
    """Register ``${tuned_lr:SCENARIO,VARIANT}`` once per process."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("tuned_lr"):
        OmegaConf.register_new_resolver("tuned_lr", tuned_lr)
