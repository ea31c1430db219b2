"""The Hydra app: ``python -m harness scenario=NAME key=value ...`` (also ``narrowband``).

A scenario is a file under the top-level ``scenarios/`` folder. It may list variants
(``variants: {name: [overrides]}``); each variant is composed anew and run as its own
run, one after another. Multirun (``-m``) sweeps work as in any Hydra app, with any launcher.
"""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from harness.conf.schema import register
from harness.validate import ConfigError, precheck_argv, translate_argv

register()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def _app(cfg: DictConfig) -> None:
    from harness.run import run_scenario

    try:
        outcomes = run_scenario(cfg, overrides=_user_overrides())
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    failed = [o for o in outcomes if o.status not in ("ok", "skipped")]
    if failed:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.get().mode == RunMode.MULTIRUN:
            # an Exception lets Hydra mark this job failed and go on with the rest of the sweep
            raise RuntimeError(f"{len(failed)} run(s) failed: {', '.join(o.run_id for o in failed)}")
        raise SystemExit(1)


def _user_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task)


def main() -> None:
    try:
        sys.argv[1:] = translate_argv(precheck_argv(sys.argv[1:]))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    _app()


if __name__ == "__main__":
    main()
