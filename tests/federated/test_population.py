"""Populations (harness/federated/population.py): seeded draws, sampling, availability, validation.

Pure tier, except the last test, which runs the command line (no namespace may appear)."""
from __future__ import annotations

import math

import pytest

from harness.errors import ConfigError
from harness.federated.population import assign
from harness.federated.settings import Settings, from_cfg

from .fakes import config

POP = dict(population=40, per_round=6, executors=2, deadline_s=1.5, ranks=[8, 4, 2], rank_weights=[1, 2, 3],
           up_mbit=[1, 20], down_mbit=[5, 50], delay_ms=[5, 60], availability="markov", p_off=0.3, p_on=0.4)


def settings(seed: int = 0, **over) -> Settings:
    cfg = config("spra", **{**POP, **over})
    cfg["seed"] = seed
    cfg["task"]["examples"] = 256
    return from_cfg(cfg)


def test_draws_sampling_and_availability_are_seeded_and_reproducible():
    a, b, c = settings(0), settings(0), settings(1)
    assert a == b and a.to_dict() == b.to_dict()
    assert Settings.from_dict(a.to_dict()) == a                      # what the roles receive
    pa, pc = a.population, c.population
    assert a.clients == 40 and len(a.ranks) == 40 and set(a.ranks) <= {8, 4, 2}
    assert [pa.sample(t) for t in range(5)] == [b.population.sample(t) for t in range(5)]
    assert [pa.trace(k) for k in range(40)] == [b.population.trace(k) for k in range(40)]
    assert (a.ranks, pa.up_bps, [pa.sample(t) for t in range(5)]) != (c.ranks, pc.up_bps, [pc.sample(t) for t in range(5)])
    for t in range(5):
        got = pa.sample(t)
        assert len(got) == 6 and len(set(got)) == 6 and got == sorted(got)
    for k in range(40):
        assert 1e6 <= pa.up_bps[k] <= 20e6 and 5e6 <= pa.down_bps[k] <= 50e6 and 0.005 <= pa.delay_s[k] <= 0.060
    # rank weights 1:2:3 for 8:4:2 -> rank 2 the most common
    assert a.ranks.count(2) > a.ranks.count(8)


def test_markov_availability_follows_its_chain():
    p = settings(rounds=400, population=30).population
    on = [sum(p.trace(k)) / 400 for k in range(30)]
    assert abs(sum(on) / 30 - 0.4 / 0.7) < 0.05                      # stationary law p_on / (p_on + p_off)
    assert settings(availability="always").population.trace(3) == [True] * 4
    stuck = settings(p_off=0.0, p_on=1.0, rounds=50).population       # never leaves once on
    assert all(all(stuck.trace(k)) for k in range(40))


def test_assign_deals_round_robin_in_sampled_order():
    assert assign([5, 9, 2, 7, 1], [1, 2]) == {1: [5, 2, 1], 2: [9, 7]}
    assert assign([], [1, 2]) == {1: [], 2: []}


def test_log_uniform_rates_cover_the_decades_evenly():
    p = settings(population=200, per_round=6).population
    low = sum(1 for r in p.up_bps if r < math.sqrt(20) * 1e6)       # below the geometric middle of [1, 20]
    assert 70 <= low <= 130


@pytest.mark.parametrize("key, value, allowed", [
    ("per_round", 41, "in 1..40"), ("per_round", 0, "in 1..40"), ("executors", 0, "in 1..40"),
    ("executors", 41, "in 1..40"), ("deadline_s", -1.0, ">= 0"), ("population", 0, ">= 1"),
    ("population", 300, "task.examples"), ("availability", "sometimes", "always, markov"),
    ("up_mbit", [5.0, 1.0], "low <= high"), ("p_off", 1.5, "[0, 1]"), ("rank_weights", [1.0, 2.0], "3 weights"),
])
def test_bad_values_name_key_value_and_what_is_allowed(key, value, allowed):
    with pytest.raises(ConfigError) as err:
        settings(**{key: value})
    text = str(err.value)
    assert text.startswith(f"federated.{key}: {value!r}") and allowed in text and "\n" not in text, text


def test_unset_population_is_the_classic_run():
    s = from_cfg(config("spra"))
    assert s.population is None and s.clients == 3 and s.ranks == (8, 4, 2)
    assert Settings.from_dict(s.to_dict()) == s


def test_the_command_line_refuses_a_bad_population_before_any_namespace(tmp_path, harness_cli):
    code, _, err, seen = harness_cli("scenario=spra_population", "only=[spra]", "federated.per_round=201",
                                     f"out_dir={tmp_path}")
    lines = err.strip().splitlines()
    assert code == 2, err[-2000:]
    assert lines == ["error: federated.per_round: 201 must be an integer in 1..200 (federated.population)"], err[-2000:]
    assert not seen and not list(tmp_path.iterdir())
