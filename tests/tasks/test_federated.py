"""The federated task: Dirichlet non-IID split, sizes, determinism, batches, loss, errors."""
from __future__ import annotations

import itertools

import pytest
import torch

from harness.tasks import build_federated, build_model, dirichlet_split
from harness.errors import ConfigError


def test_split_sizes_disjoint_and_deterministic(task_cfg, tok):
    cfg = {**task_cfg, "client_sizes": [40, 10, 25]}
    a = build_federated(cfg, tok, n_clients=5, seed=0)
    assert [len(a.client_data(k)) for k in range(5)] == [40, 10, 25, 40, 10]
    keys = [tuple(zip(c.problems.a.tolist(), c.problems.op.tolist(), c.problems.b.tolist())) for c in a.clients]
    flat = [k for ks in keys for k in ks]
    assert len(flat) == len(set(flat))                         # no example on two clients
    assert not bool(a.lang.is_eval(a.client_data(0).problems).any())
    b = build_federated(cfg, tok, n_clients=5, seed=0)
    assert all(torch.equal(x.problems.a, y.problems.a) and torch.equal(x.categories, y.categories)
               for x, y in zip(a.clients, b.clients))
    c = build_federated(cfg, tok, n_clients=5, seed=1)
    assert not torch.equal(a.client_data(0).problems.a, c.client_data(0).problems.a)


def test_equal_split_when_no_sizes(task_cfg, tok):
    task = build_federated({**task_cfg, "examples": 100, "client_sizes": []}, tok, n_clients=3, seed=0)
    assert [len(task.client_data(k)) for k in range(3)] == [34, 33, 33]


def _concentration(alpha: float, seed: int = 0) -> float:
    """Mean share of each client's largest category."""
    cats = torch.arange(4).repeat(500)
    parts = dirichlet_split(cats, 4, [50] * 10, alpha, seed)
    return sum(float(torch.bincount(cats[p], minlength=4).max()) / len(p) for p in parts) / len(parts)


def test_lower_alpha_is_more_non_iid():
    assert _concentration(0.05) > 0.85
    assert _concentration(100.0) < 0.4
    assert _concentration(0.05) > _concentration(1.0) > _concentration(100.0)
    cats = torch.arange(4).repeat(50)
    assert [p.tolist() for p in dirichlet_split(cats, 4, [20, 30], 0.5, 7)] == \
           [p.tolist() for p in dirichlet_split(cats, 4, [20, 30], 0.5, 7)]


def test_exhausted_categories_fall_back():
    cats = torch.tensor([0] * 5 + [1] * 100)
    parts = dirichlet_split(cats, 2, [60, 45], 0.01, 0)
    assert sorted(torch.cat(parts).tolist()) == list(range(105))


@pytest.mark.parametrize("clients,extra,match", [
    (300, {}, "federated.clients: 300 clients but only 256 examples"),
    (3, {"client_sizes": [100, 100, 100]}, "task.client_sizes: the clients need 300 examples"),
    (2, {"client_sizes": [5, 0]}, "task.client_sizes"),
    (2, {"alpha": 0.0}, "task.alpha"),
    (2, {"examples": 10 ** 6}, "task.examples"),
])
def test_clear_errors(task_cfg, tok, clients, extra, match):
    with pytest.raises(ConfigError, match=match):
        build_federated({**task_cfg, **extra}, tok, n_clients=clients, seed=0)


def test_batches_loss_and_evaluate(model_cfg, task_cfg, tok):
    task = build_federated({**task_cfg, "client_sizes": [10, 20]}, tok, n_clients=2, seed=0)
    batches = list(itertools.islice(task.batches(0, 4, torch.Generator().manual_seed(0)), 6))
    assert [len(b["input_ids"]) for b in batches] == [4, 4, 2, 4, 4, 2]        # endless epochs of 10
    b = batches[0]
    answer = b["labels"] != -100
    assert bool((b["attention_mask"].bool() | ~answer).all())
    assert int((b["labels"] == tok.eos_id).sum()) == 4                          # each answer ends with eos
    first = torch.tensor([tok.decode(r[m]) != "" for r, m in zip(b["input_ids"], answer)])
    assert bool(first.all())
    again = list(itertools.islice(task.batches(0, 4, torch.Generator().manual_seed(0)), 6))
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(batches, again))
    model = build_model(model_cfg, tok.vocab_size)
    loss = task.loss(model, b)
    assert loss.ndim == 0 and 1.0 < float(loss.detach()) < 6.0                 # ~ln(18) untrained
    m1, m2 = task.evaluate(model), task.evaluate(model)
    assert m1 == m2 and set(m1) == {"eval_loss", "accuracy"} and 0.0 <= m1["accuracy"] <= 1.0
