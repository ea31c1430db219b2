"""FLOPs of local training: a hand count for one LoRA module, and the model walk against torch's
own FlopCounterMode (which counts the matmuls autograd actually runs)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from harness.federated.flops import LinearShape, linear_flops, observe, step_flops
from harness.tasks.models import build_model, make_lora
from harness.tasks.tokenizer import Tokenizer
from tests.federated.fakes import config


def test_hand_count_one_lora_module() -> None:
    # q_proj 32 -> 48, rank 4, 10 tokens, input needs grad (a layer after a trainable one).
    n, di, do, r = 10, 32, 48, 4
    dense, down, up = 2 * n * di * do, 2 * n * di * r, 2 * n * r * do
    fedit = linear_flops(LinearShape(di, do, r, a_trainable=True, b_trainable=True, input_grad=True), n)
    assert fedit.forward == dense + down + up
    assert fedit.input_grad == dense + up + down           # x.grad through W and through A; h.grad through B
    assert fedit.weight_grad == up + down                  # B.grad and A.grad; W frozen
    spra = linear_flops(LinearShape(di, do, r, a_trainable=False, b_trainable=True, input_grad=True), n)
    assert spra.forward == fedit.forward and spra.input_grad == fedit.input_grad
    assert spra.weight_grad == up                          # frozen A: no A gradient
    first = linear_flops(LinearShape(di, do, r, a_trainable=False, b_trainable=True, input_grad=False), n)
    assert first.input_grad == 0 and first.weight_grad == up   # nothing upstream trains, A frozen: h needs no grad
    frozen = linear_flops(LinearShape(di, do), n)
    assert frozen.total == dense                           # a frozen layer with a frozen input: forward only


def _counted(model: nn.Module, batch: torch.Tensor) -> int:
    """FLOPs torch counts for one forward + backward of the linears (mm/addmm/bmm of 2-D weights)."""
    with FlopCounterMode(display=False) as counter:
        out = model(batch)
        out.float().pow(2).mean().backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("train_a", [True, False])
def test_walk_matches_flop_counter_on_a_lora_mlp(train_a: bool) -> None:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(24, 40, bias=False), nn.ReLU(), nn.Linear(40, 24, bias=False),
                         nn.Linear(24, 16, bias=False))
    for p in base.parameters():
        p.requires_grad_(False)
    model = make_lora(copy.deepcopy(base), rank=4, targets=["0", "2"], init="default")
    for name, p in model.named_parameters():
        if "lora_A" in name:
            p.requires_grad_(train_a)
    x = torch.randn(3, 5, 24)
    with observe(model) as shapes:
        model(x)
    assert len(shapes) == 3                                # two LoRA layers + the plain head, none twice
    assert step_flops(shapes, tokens=15).total == _counted(model, x)


def test_walk_on_the_tiny_transformer_counts_only_what_differs() -> None:
    """On a transformer the walk's FedIT - SPRA difference equals torch's (attention cancels)."""
    cfg = config("fedit")
    tok = Tokenizer.synthetic()
    ids = torch.randint(0, tok.vocab_size, (2, 7))
    totals = {}
    for train_a in (True, False):
        model = make_lora(build_model(cfg["model"], tok.vocab_size), rank=4, targets=cfg["model"]["targets"])
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.requires_grad_(train_a)
        with observe(model) as shapes:
            model(input_ids=ids)
        with FlopCounterMode(display=False) as counter:
            model(input_ids=ids).logits.float().mean().backward()
        totals[train_a] = (step_flops(shapes, 14).total, counter.get_total_flops())
    walk_diff = totals[True][0] - totals[False][0]
    torch_diff = totals[True][1] - totals[False][1]
    assert walk_diff == torch_diff > 0
    assert totals[False][0] <= totals[False][1]            # the walk leaves out attention scores only


def test_adapter_flops_by_hand_on_a_tiny_shape() -> None:
    """LoRA's own FLOPs (flops.adapter_flops): the whole count minus the frozen weight's forward and
    backward to the inputs. q_proj 32 -> 48, rank 4, 10 tokens."""
    from harness.federated.flops import adapter_flops, step_adapter_flops

    n, di, do, r = 10, 32, 48, 4
    down, up = 2 * n * di * r, 2 * n * r * do            # 2560 and 3840
    inner_a = adapter_flops(LinearShape(di, do, r, a_trainable=True, b_trainable=True, input_grad=True), n)
    assert (inner_a.forward, inner_a.input_grad, inner_a.weight_grad) == (6400, 6400, 6400)
    assert (down + up) == 6400
    inner_frozen = adapter_flops(LinearShape(di, do, r, a_trainable=False, b_trainable=True, input_grad=True), n)
    assert (inner_frozen.forward, inner_frozen.input_grad, inner_frozen.weight_grad) == (6400, 6400, 3840)
    first_a = adapter_flops(LinearShape(di, do, r, a_trainable=True, b_trainable=True, input_grad=False), n)
    assert (first_a.forward, first_a.input_grad, first_a.weight_grad) == (6400, 3840, 6400)   # h.grad, no x.grad
    first_frozen = adapter_flops(LinearShape(di, do, r, a_trainable=False, b_trainable=True, input_grad=False), n)
    assert (first_frozen.forward, first_frozen.input_grad, first_frozen.weight_grad) == (6400, 0, 3840)
    assert adapter_flops(LinearShape(di, do), n).total == 0           # no LoRA: nothing of the adapter's
    shapes = [LinearShape(di, do, r, True, True, input_grad=False), LinearShape(do, di, r, True, True, input_grad=True),
              LinearShape(di, 7)]
    whole, own = step_flops(shapes, n), step_adapter_flops(shapes, n)
    frozen = 2 * n * di * do + 2 * (2 * n * do * di) + 2 * n * di * 7   # W forward, + x.grad on layer 2 only
    assert whole.total - own.total == frozen
    with pytest.raises(ValueError, match="trainable base weight"):
        adapter_flops(LinearShape(di, do, r, w_trainable=True), n)
