"""spar: rank allocation against brute force, exact reconstruction at full rank, ranks recorded."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from compress_inputs import lora_like, lowrank, rel_error
from harness.compress import build
from harness.compress.allocate import allocate_exact, allocate_greedy, kept_energy
from harness.compress.spar import spectra


def brute_force(energies, costs, budget):
    best = 0.0
    for ks in itertools.product(*[range(len(e) + 1) for e in energies]):
        if sum(k * c for k, c in zip(ks, costs)) <= budget:
            best = max(best, kept_energy(energies, list(ks)))
    return best


def random_case(rng, equal_costs):
    n = int(rng.integers(1, 4))
    energies = [np.sort(rng.random(int(rng.integers(1, 5))))[::-1] for _ in range(n)]
    costs = [3] * n if equal_costs else [int(c) for c in rng.integers(1, 7, n)]
    return energies, costs, int(rng.integers(0, 20))


def test_greedy_equals_brute_force_when_costs_per_rank_are_equal():
    rng = np.random.default_rng(0)
    for _ in range(300):
        energies, costs, budget = random_case(rng, equal_costs=True)
        ranks = allocate_greedy(energies, costs, budget)
        assert sum(k * c for k, c in zip(ranks, costs)) <= budget
        assert kept_energy(energies, ranks) == pytest.approx(brute_force(energies, costs, budget))


def test_exact_always_equals_brute_force_and_greedy_is_within_one_triplet():
    rng = np.random.default_rng(1)
    greedy_optimal = 0
    for _ in range(300):
        energies, costs, budget = random_case(rng, equal_costs=False)
        best = brute_force(energies, costs, budget)
        exact = allocate_exact(energies, costs, budget)
        greedy = allocate_greedy(energies, costs, budget)
        for ranks in (exact, greedy):
            assert sum(k * c for k, c in zip(ranks, costs)) <= budget
            assert all(0 <= k <= len(e) for k, e in zip(ranks, energies))
        assert kept_energy(energies, exact) == pytest.approx(best)
        # the knapsack bound: OPT <= greedy + the largest triplet greedy left out
        skipped = max([e[k] for e, k in zip(energies, greedy) if k < len(e)], default=0.0)
        assert kept_energy(energies, greedy) >= best - skipped - 1e-12
        greedy_optimal += kept_energy(energies, greedy) == pytest.approx(best)
    assert greedy_optimal >= 0.9 * 300


def test_greedy_fills_the_tail_with_any_affordable_triplet():
    # ratio order: matrix 0 (5/4) first, then matrix 1's 0.9/3 does not fit in the 2 bytes left,
    # but matrix 2's 0.1/1 and 0.05/1 do: the tail is not wasted.
    ranks = allocate_greedy([np.array([5.0]), np.array([0.9]), np.array([0.1, 0.05])], [4, 3, 1], 6)
    assert ranks == [1, 0, 2]


def test_full_rank_reconstruction_is_exact_up_to_the_wire_dtype():
    grads = lora_like(seed=2)
    big = 10 * 4 * sum(t.numel() for t in grads.values())
    fp32 = build("spar", budget_bytes=big, dtype="fp32")
    payload = fp32.encode(grads)
    assert all(k == min(grads[n].shape) for n, k in payload.info["ranks"].items())
    assert rel_error(grads, fp32.decode(payload)) < 2e-6
    bf16 = build("spar", budget_bytes=big)
    assert rel_error(grads, bf16.decode(bf16.encode(grads))) < 2 ** -8   # two bf16 factors: ~2 x 2^-9
    int8 = build("spar", budget_bytes=big, dtype="int8")
    assert rel_error(grads, int8.decode(int8.encode(grads))) < 0.02


def test_gram_and_svd_spectra_agree_and_give_the_best_rank_k():
    g = torch.Generator().manual_seed(0)
    for shape in [(8, 48), (80, 8)]:
        mats = torch.stack([lowrank(*shape, 0.6, g) for _ in range(3)])
        e_gram, l_gram, r_gram = spectra(mats, "gram")
        e_svd, l_svd, r_svd = spectra(mats, "svd")
        assert torch.allclose(e_gram, e_svd, rtol=1e-4, atol=1e-7)
        for k in (1, 3, 8):
            a = l_gram[:, :, :k] @ r_gram[:, :, :k].mT
            b = l_svd[:, :, :k] @ r_svd[:, :, :k].mT
            assert torch.allclose(a, b, atol=1e-5)
            err = (mats - a).square().sum(dim=(1, 2))          # Eckart-Young: the dropped energy
            assert torch.allclose(err, e_svd[:, k:].sum(dim=1), rtol=1e-3, atol=1e-7)


def test_adaptive_ranks_are_recorded_and_favour_energy(grads):
    grads = dict(grads)
    quiet = "model.layers.1.v_proj.lora_B.weight"
    grads[quiet] = grads[quiet] * 1e-4                      # almost no energy: should get rank 0
    payload = build("spar", budget=0.4).encode(grads)
    ranks = payload.info["ranks"]
    assert set(ranks) == {n for n, t in grads.items() if t.ndim == 2}
    assert ranks[quiet] == 0 and max(ranks.values()) > 1
    assert payload.info["dense"] == 1                        # the 1-D bias went dense
    assert 0 < payload.info["energy_kept"] < 1
    decoded = build("spar", budget=0.4).decode(payload)
    assert torch.equal(decoded["model.norm.bias"], grads["model.norm.bias"].bfloat16().float())
    assert torch.equal(decoded[quiet], torch.zeros_like(grads[quiet]))


def test_exact_allocator_keeps_at_least_the_greedy_energy(grads):
    greedy = build("spar", budget=0.1).encode(grads).info["energy_kept"]
    exact = build("spar", budget=0.1, allocator="exact").encode(grads).info["energy_kept"]
    assert exact >= greedy - 1e-9


def test_zero_gradient_ships_nothing_and_decodes_to_zero():
    zeros = {"a": torch.zeros(8, 32), "b": torch.zeros(32, 8)}
    comp = build("spar", budget=0.5)
    payload = comp.encode(zeros)
    assert payload.info["ranks"] == {"a": 0, "b": 0}
    assert all(torch.equal(t, torch.zeros_like(t)) for t in comp.decode(payload).values())


def test_both_gram_paths_ship_the_svd_reference_ranks_and_factors(grads, monkeypatch):
    """Below a rank-1-everywhere budget Spar takes eigenvalues first and eigenvectors only where
    rank > 0; at or above it, one eigh per shape (also when the greedy still gives a matrix rank
    0). Either way: the energy the svd reference keeps and its reconstruction error."""
    from harness.compress.spar import Spar

    paths = []
    energies = Spar._energies
    monkeypatch.setattr(Spar, "_energies", lambda self, groups, step, vectors=False:
                        paths.append((self.svd, vectors)) or energies(self, groups, step, vectors))
    for budget in (0.1, 0.4, 0.6):
        gram = build("spar", budget=budget, svd="gram")
        ref = build("spar", budget=budget, svd="svd")
        a, b = gram.encode(grads), ref.encode(grads)
        # near-equal energies of two matrices may be ordered differently by eigvalsh and svd,
        # so the allocation is compared by what it keeps, not matrix by matrix
        assert abs(a.info["energy_kept"] - b.info["energy_kept"]) < 1e-5, budget
        assert abs(rel_error(grads, gram.decode(a)) - rel_error(grads, ref.decode(b))) < 1e-3, budget
        if budget == 0.4:
            assert 0 in a.info["ranks"].values()
    assert [v for svd, v in paths if svd == "gram"] == [False, True, True]


def test_sketch_ritz_values_are_lower_bounds_and_find_the_top_of_a_decaying_spectrum():
    """The sketch's energies for one matrix never exceed the exact top-k (Ritz values of a
    subspace interlace), and on a decaying spectrum its top ones are the exact ones."""
    from harness.compress.spar import Spar, _gram

    g = torch.Generator().manual_seed(4)
    for shape in [(32, 96), (120, 24)]:
        batch = torch.stack([lowrank(*shape, 0.7, g) for _ in range(3)])
        energy, total, vectors = Spar(budget=0.1)._sketch(_gram(batch), step=0)
        exact = torch.linalg.eigvalsh(_gram(batch)).flip(-1)
        q = energy.shape[-1]
        assert q == 12 and vectors.shape == (3, min(shape), 12)
        assert torch.allclose(vectors.mT @ vectors, torch.eye(12).expand(3, 12, 12), atol=1e-5)
        assert torch.all(energy <= exact[:, :q] * (1 + 1e-4) + 1e-6)
        assert torch.allclose(energy[:, :3], exact[:, :3], rtol=1e-3)
        assert torch.allclose(total, batch.square().sum((-2, -1)), rtol=1e-4)


def test_sketch_ships_what_exact_spectra_ship_within_a_small_error():
    grads = lora_like(seed=3, r=32, d=96, ffn=160)
    for budget in (0.02, 0.1):
        sketch, exact = build("spar", budget=budget), build("spar", budget=budget, svd="gram")
        a, b = sketch.encode(grads, 5), exact.encode(grads, 5)
        assert a.nbytes <= a.info["budget_bytes"] and max(a.info["ranks"].values()) > 0
        assert a.info["energy_kept"] <= b.info["energy_kept"] + 1e-6
        assert a.info["energy_kept"] >= 0.97 * b.info["energy_kept"]
        assert rel_error(grads, sketch.decode(a)) <= 1.02 * rel_error(grads, exact.decode(b))
        assert a.to_bytes() == build("spar", budget=budget).encode(grads, 5).to_bytes()   # seeded


def test_a_sketched_matrix_that_gets_every_direction_found_is_redone_exactly():
    """At a budget that buys full rank everywhere every sketched matrix saturates the 6
    directions the allocation is shown, moves to an exact eigh, and gets the exact path's rank (every direction with
    energy; these B-gradients have rank < 16) and its reconstruction (fp32 Gram matrices leave
    ~5e-5 of the directions they drop as near-zero)."""
    grads = lora_like(seed=2, r=16, d=48, ffn=80)
    big = 10 * 4 * sum(t.numel() for t in grads.values())
    comp = build("spar", budget_bytes=big, dtype="fp32")
    payload = comp.encode(grads)
    gram = build("spar", budget_bytes=big, dtype="fp32", svd="gram")
    exact = gram.encode(grads)
    assert payload.info["ranks"] == exact.info["ranks"]
    assert min(payload.info["ranks"].values()) > 8
    assert rel_error(grads, comp.decode(payload)) == pytest.approx(rel_error(grads, gram.decode(exact)), rel=1e-3)
    assert rel_error(grads, comp.decode(payload)) < 1e-4
