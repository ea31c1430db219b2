"""The Hydra app: ``python -m harness scenario=NAME key=value ...`` (also ``narrowband``).

A scenario is a file under the top-level ``scenarios/`` folder. It may list variants
(``variants: {name: [overrides]}``); each variant is composed anew and run as its own
run, one after another. Multirun (``-m``) sweeps work as in any Hydra app, with any launcher.

A single run's overrides are composed once, before anything else, so that a bad one (a
value of the wrong type, an unknown key, bad override syntax) ends with one line naming
the key and exit status 2 instead of Hydra's multi-line report; that config is the one that
runs (Hydra does not compose it again). With any ``-`` flag
(``-m``, ``--cfg`` ...) that check is left to Hydra. ``--help`` / ``-h`` print narrowband's own
screen (harness.commands.usage: scenarios, config groups, commands; Hydra's is ``--hydra-help``), and
a bare ``python -m harness`` says how to start and exits with status 2.
"""
from __future__ import annotations

import os
import re
import sys

import hydra
from omegaconf import DictConfig

from harness.checks import MULTIRUN_FLAGS, normalise_argv
from harness.conf.schema import register
from harness.errors import ConfigError
from harness.sweeplabel import SWEPT_ENV, swept_keys_of_argv
from harness.validate import precheck_argv, translate_argv

register()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def _app(cfg: DictConfig) -> None:
    """Hydra's entry: a multirun job, or a command line Hydra reads itself (``--cfg``, ``hydra.*``)."""
    run(cfg, _user_overrides(), _multirun())


def run(cfg: DictConfig, overrides: list[str], multirun: bool = False) -> None:
    """Run the scenario of the composed ``cfg``; one line and exit 2 for bad input, exit 1 when a run failed.
    In a multirun job every problem is an exception instead (see :func:`_multirun`)."""
    from omegaconf.errors import OmegaConfBaseException

    from harness.record import OutDirFull
    from harness.run import HELD, HELD_EXIT, run_scenario
    from harness.tuned_lr import config_error_in

    try:
        outcomes = run_scenario(cfg, overrides=overrides)
    except OutDirFull as full:          # out_dir filled up or turned unwritable mid-run: one line, no traceback
        print(f"[narrowband] {full}", file=sys.stderr, flush=True)
        if multirun:
            raise
        raise SystemExit(1) from None
    except (ConfigError, OmegaConfBaseException) as raised:
        err = config_error_in(raised)     # a resolver's too (${tuned_lr:...} without its tuning file)
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        if multirun:
            raise   # this grid point's failure (see below), not the end of the sweep
        raise SystemExit(2) from None
    failed = [o for o in outcomes if o.status not in ("ok", "skipped")]
    if failed:
        if multirun:
            raise RuntimeError(f"{len(failed)} run(s) failed: {', '.join(o.run_id for o in failed)}")
        raise SystemExit(1)
    if outcomes and all(o.reason == HELD for o in outcomes) and not multirun:
        print(f"[narrowband] nothing ran: every run of this command is {HELD} (its .lock); run the command again "
              f"when that one ends (complete runs are then skipped). Exit status {HELD_EXIT}.", file=sys.stderr)
        raise SystemExit(HELD_EXIT)


def _multirun() -> bool:
    """True inside a multirun job. There a job's problem must be an ordinary exception, never
    SystemExit: Hydra's job runner catches only ``Exception``, records it as that job's
    failure and goes on with the sweep; a launcher that runs jobs in other processes
    (submitit: local or Slurm) pickles it back to the sweep. A SystemExit would end the basic
    launcher's whole sweep, and a submitit job would exit with no result file (submitit's
    ``UncompletedJobError``: 'has not produced any output')."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.get().mode == RunMode.MULTIRUN


def _user_overrides() -> list[str]:
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task)


_KINDS = {"Integer": "an int", "Float": "a float", "Boolean": "a bool", "String": "a string"}


def compose_error(argv: list[str]) -> str | None:
    """One line for overrides that do not compose (``model.rank: 'abc' is not an int ...``), or None."""
    return compose_checked(argv)[0]


def compose_checked(argv: list[str]) -> tuple[str | None, DictConfig | None]:
    """(one line for overrides that do not compose, or None; the config to run, or None).

    A single run's plain overrides are composed here once, and that config is the one that runs
    (Hydra does not compose it again). A multirun's (``-m``) are checked, every value of every swept
    key once (harness.checks.sweep_points), and ``hydra.*`` overrides are Hydra's own: then the
    config is None and Hydra composes each job. With any other ``-`` flag (``--cfg``, help ...)
    Hydra reads the command line itself and nothing is checked here.
    """
    from hydra.errors import HydraException

    from harness.checks import MULTIRUN_FLAGS, sweep_points

    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in argv):
        return None, None
    overrides = [a for a in argv if not a.startswith("-") and not a.lstrip("+~").startswith(("hydra.", "hydra/"))]
    if len(overrides) == len(argv):
        return _one_compose(overrides)
    try:
        points = sweep_points(overrides)
    except HydraException as err:
        return f"{_bad_syntax(overrides)}: {str(err).splitlines()[0]} (see Hydra's override grammar)", None
    for point in points:
        error = _one_compose_error(point)
        if error:
            return error, None
    return None, None


def _one_compose_error(overrides: list[str]) -> str | None:
    """compose_error for one plain override list."""
    return _one_compose(overrides)[0]


def _one_compose(overrides: list[str]) -> tuple[str | None, DictConfig | None]:
    """(the error line, None) for one plain override list, or (None, the composed config)."""
    from hydra.errors import HydraException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

    from harness.checks import added_unknown_key
    from harness.compose import compose_config

    try:
        cfg = compose_config(overrides)
    except OverrideParseException as err:
        return f"{_bad_syntax(overrides)}: {str(err).splitlines()[0]} (see Hydra's override grammar)", None
    except (HydraException, OmegaConfBaseException) as err:
        cause = err.__cause__ if isinstance(err.__cause__, OmegaConfBaseException) else err
        first = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        key = getattr(cause, "full_key", None) or first
        named = [a.lstrip("+~").split("=", 1) for a in overrides if "=" in a]
        given = next((v for k, v in named if k == key), None)
        kind = re.search(r"could not be converted to (\w+)", first)
        if kind and given is not None:
            hint = ""
            if given.endswith("%"):
                from harness.checks import FRACTION_KEYS
                hint = f"; a percentage is read only for {', '.join(FRACTION_KEYS)}"
            return f"{key}: {given!r} is not {_KINDS.get(kind.group(1), kind.group(1))} ({first}){hint}", None
        if isinstance(cause, (ConfigKeyError, ConfigAttributeError)) and " not in " in first:
            line = _unknown_key_line(key, overrides)
            if line:
                return line, None
        key = next((k for k, _ in named if k.startswith(f"{key}.")), key)
        return (f"{key}: {first}" if key != first else first), None
    for arg in overrides:
        line = added_unknown_key(arg)
        if line:
            return line, None
    error = value_error(cfg, overrides)
    return (error, None) if error else (None, cfg)


def _unknown_key_line(missing: str, overrides: list[str]) -> str | None:
    """``harness.checks.unknown_key``'s line for ``missing`` (a full key), listing the keys its section
    has in the config composed without the override that named it; None if that does not compose."""
    from omegaconf import DictConfig, OmegaConf

    from harness.checks import unknown_key
    from harness.compose import compose_config

    def reaches(arg: str) -> bool:
        k = arg.lstrip("+~").split("=", 1)[0]
        return k == missing or k.startswith(f"{missing}.")

    given = next((a.lstrip("+~").split("=", 1)[0] for a in overrides if reaches(a)), None)
    try:
        base = compose_config([a for a in overrides if not reaches(a)])
    except Exception:        # noqa: BLE001 - another problem: the caller's plain line
        return None
    parent = missing.rpartition(".")[0]
    section = OmegaConf.select(base, parent) if parent else base
    if not isinstance(section, DictConfig):
        return None
    return unknown_key(missing, [str(k) for k in section.keys()], given=given)


def value_error(cfg, overrides: list[str]) -> str | None:
    """The field checks' line (harness.validate, which needs no torch) for a value the user gave,
    else None. Only a key of the command line is judged here: a user's value wins over every
    variant's, so it is as wrong in each of them; anything else waits for the planner."""
    from harness.errors import ConfigError
    from harness.validate import validate

    keys = {a.lstrip("+~").split("=", 1)[0] for a in overrides if "=" in a}
    try:
        validate(cfg)
    except ConfigError as err:
        line = str(err)
        return line if any(line.startswith(f"{k}:") for k in keys) else None
    except Exception:        # noqa: BLE001 - e.g. an interpolation only a variant completes: the planner reports it
        return None
    return None


def _bad_syntax(overrides: list[str]) -> str:
    """The first override Hydra's grammar cannot parse (for the error line)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for o in overrides:
        try:
            parser.parse_override(o)
        except HydraException:
            return o
    return "override"


def main() -> None:
    from harness.commands.usage import HELP_FLAGS, help_text, start_text

    if not sys.argv[1:]:
        print(start_text(), file=sys.stderr)
        raise SystemExit(2)
    if any(a in HELP_FLAGS for a in sys.argv[1:]):
        print(help_text())
        return
    try:
        sys.argv[1:] = translate_argv(precheck_argv(normalise_argv(sys.argv[1:])))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    error, cfg = compose_checked(sys.argv[1:])
    if error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2)
    if any(a in MULTIRUN_FLAGS for a in sys.argv[1:]):      # the jobs name their runs by these keys' values
        os.environ[SWEPT_ENV] = " ".join(swept_keys_of_argv(sys.argv[1:]))
    if cfg is None:
        _app()                      # Hydra reads the command line (multirun, --cfg, hydra.* overrides)
    else:
        run(cfg, list(sys.argv[1:]))     # composed once: the config checked above is the one that runs


if __name__ == "__main__":
    main()
