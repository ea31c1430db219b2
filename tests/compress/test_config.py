"""Every compressor option file composes against CompressorConfig and builds what it names."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

import harness
from harness.compress import NAMES, ErrorFeedback, build_from_config
from harness.conf.schema import register

CONF = Path(harness.__file__).parent / "conf"


@pytest.fixture(scope="module")
def compose_compressor():
    register()
    ConfigStore.instance().store(name="_compressor_only", node={"defaults": [{"compressor": "spar"}, "_self_"]})
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        yield lambda *overrides: compose(config_name="_compressor_only", overrides=list(overrides)).compressor


def test_there_is_one_option_file_per_compressor():
    assert sorted(p.stem for p in (CONF / "compressor").glob("*.yaml")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_option_file_composes_and_builds(compose_compressor, name, grads):
    cfg = compose_compressor(f"compressor={name}")
    assert cfg.name == name
    text = (CONF / "compressor" / f"{name}.yaml").read_text()
    assert text.startswith("#") and "defaults: [compressor_schema, _self_]" in text
    options = OmegaConf.to_container(cfg)
    if name != "identity":
        options["budget"] = 0.2     # the test tensors are tiny: 1.6% would not hold the header
    comp = build_from_config(options)
    assert isinstance(comp, ErrorFeedback) == bool(cfg.error_feedback)
    payload = comp.encode(grads)
    assert payload.nbytes == len(payload.to_bytes())


def test_a_typo_fails_when_composed(compose_compressor):
    with pytest.raises(ConfigCompositionException):
        compose_compressor("compressor=spar", "compressor.budgit=0.1")
