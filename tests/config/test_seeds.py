"""Composed tier: seeds are an axis. A scenario's ``seeds`` list (or ``seeds=[..]``) runs every
variant at every seed, interleaved per seed; ``seed=N`` on the command line runs that seed;
run ids carry the seed; a bad list fails with one line naming the key."""
from __future__ import annotations

import pytest

from harness.errors import ConfigError
from harness.compose import compose_config
from harness.scenario import run_id_of, seeds_of


def test_seeds_list_is_used_unless_the_command_line_names_a_seed():
    base = ["scenario=smoke_hilo", "seeds=[0,1,2]"]
    assert seeds_of(compose_config(base), base) == [0, 1, 2]
    one = base + ["seed=5"]
    assert seeds_of(compose_config(one), one) == [5]
    plain = ["scenario=smoke_hilo", "seed=3"]
    assert seeds_of(compose_config(plain), plain) == [3]
    assert seeds_of(compose_config(["scenario=smoke_hilo"]), ["scenario=smoke_hilo"]) == [0]


@pytest.mark.parametrize("bad, why", [("seeds=[0,0]", "twice"), ("seeds=[-1]", "integers >= 0")])
def test_bad_seed_lists_name_the_key(bad, why):
    over = ["scenario=smoke_hilo", bad]
    with pytest.raises(ConfigError, match=f"^seeds: .*{why}"):
        seeds_of(compose_config(over), over)


def test_run_ids_carry_the_seed_and_the_seed_list_leaves_the_hash_alone():
    a = compose_config(["scenario=smoke_hilo", "seed=0"])
    b = compose_config(["scenario=smoke_hilo", "seed=1"])
    c = compose_config(["scenario=smoke_hilo", "seed=0", "seeds=[0,1]"])
    assert run_id_of(a, "hilo_spar").startswith("hilo_spar-s0-")
    assert run_id_of(b, "hilo_spar").startswith("hilo_spar-s1-")
    assert run_id_of(a, "hilo_spar") == run_id_of(c, "hilo_spar")       # resume finds seed 0's run


def test_run_ids_hash_what_auto_resolved_to():
    auto = compose_config(["scenario=smoke_hilo", "net.backend=auto"])
    tc = compose_config(["scenario=smoke_hilo", "net.backend=tc"])
    assert run_id_of(auto, "hilo_spar", "tc") == run_id_of(tc, "hilo_spar", "tc")
    assert run_id_of(auto, "hilo_spar", "tc") != run_id_of(auto, "hilo_spar", "userspace")
    assert run_id_of(tc, "hilo_spar", "userspace") == run_id_of(tc, "hilo_spar")   # a pinned backend is hashed as asked
