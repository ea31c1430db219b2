"""The fast held-out evaluation (harness.tasks.chat_eval: the shared template prefix once, prefill
of each prompt's own tokens, the reference answer teacher-forced on the prompt's cache) against the
plain path (rollouts.sample and one full forward), on tiny self-built models of four families."""
from __future__ import annotations

import pytest
import torch

from chat_model import chat_model, chat_tokenizer
from harness.tasks.arith import Problems
from harness.tasks.chat import ChatPrompts, ChatSpec
from harness.tasks.chat_eval import _answer_logprob_plain, _left_pad, common_prefix, greedy_scored, reverse_kl_scorer
from harness.tasks.rollouts import forward_logits, sample
from harness.tasks.tokenizer import Tokenizer


def _model(family: str, tmp_path):
    tok = Tokenizer(chat_tokenizer())
    if family == "chat":
        model = chat_model(tok.vocab_size, seed=3)
        with torch.no_grad():                       # make eos likely, so rows finish at different steps
            model.lm_head.weight[tok.eos_id] *= 0
            model.model.embed_tokens.weight[tok.eos_id] += 0.5
        return model, tok.vocab_size
    from transformers import AutoModelForCausalLM

    from hf_families import save_family
    model = AutoModelForCausalLM.from_pretrained(str(save_family(family, tmp_path / family, seed=1)))
    return model, model.config.vocab_size


def _rows(vocab: int, pad: int, seed: int = 0) -> tuple[list[list[int]], list[list[int]]]:
    """Prompts that share a 6-token prefix then differ in length; answers of 1-3 tokens and eos."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(0, vocab - 3, (n,), generator=g).tolist()   # noqa: E731
    prefix = rand(6)
    rows = [prefix + rand(n) for n in (3, 9, 5, 1, 7)]
    answers = [rand(n) + [vocab - 2] for n in (1, 3, 2, 1, 2)]
    return rows, answers


@pytest.mark.parametrize("family", ["chat", "qwen2", "gpt2", "gpt_neox"])
def test_scored_greedy_equals_the_plain_path(family, tmp_path):
    model, vocab = _model(family, tmp_path)
    model.eval()
    pad, eos = vocab - 1, vocab - 2
    rows, answers = _rows(vocab, pad)
    assert common_prefix(rows) == 6
    out = greedy_scored(model, rows, answers, 6, eos_id=eos, pad_id=pad, batch=2)   # several batches
    prompts, pmask = _left_pad(rows, pad)
    comp, mask, _ = sample(model, prompts, pmask.bool(), 6, group=1, eos_id=eos, pad_id=pad)
    assert torch.equal(out.mask, mask) and torch.equal(torch.where(mask, out.completions, pad), comp)
    want = _answer_logprob_plain(model, prompts, pmask, answers, pad)
    assert torch.allclose(out.answer_logprob, want.double(), atol=1e-4, rtol=1e-5)
    assert bool((out.answer_logprob < 0).all())



def _teacher(family: str, tmp_path):
    """Another model of the same family and vocabulary (other weights): a distillation teacher."""
    if family == "chat":
        return chat_model(Tokenizer(chat_tokenizer()).vocab_size, seed=5).eval()
    from transformers import AutoModelForCausalLM

    from hf_families import save_family
    return AutoModelForCausalLM.from_pretrained(str(save_family(family, tmp_path / f"{family}-teacher", seed=2))).eval()


@pytest.mark.parametrize("family", ["chat", "qwen2", "gpt2", "gpt_neox"])
def test_reverse_kl_scored_while_decoding_equals_two_full_passes(family, tmp_path):
    """The distillation score computed on the way (the decode loop's own logits for the student, one
    teacher pass on its prefix cache) against one full teacher-forced pass of each model over prompt and
    completion: the same per-prompt reverse KL up to float rounding, and the greedy outputs unchanged."""
    model, vocab = _model(family, tmp_path)
    model.eval()
    teacher = _teacher(family, tmp_path)
    pad, eos = vocab - 1, vocab - 2
    rows, answers = _rows(vocab, pad)
    scorer = reverse_kl_scorer(teacher, rows, pad)
    assert scorer is not None
    out = greedy_scored(model, rows, answers, 6, eos_id=eos, pad_id=pad, batch=2, score_batch=scorer)
    plain = greedy_scored(model, rows, answers, 6, eos_id=eos, pad_id=pad, batch=2)
    assert plain.extra is None
    assert torch.equal(out.completions, plain.completions) and torch.equal(out.mask, plain.mask)
    assert torch.equal(out.answer_logprob, plain.answer_logprob)
    prompts, pmask = _left_pad(rows, pad)
    ids, attn = torch.cat([prompts, out.completions], 1), torch.cat([pmask, torch.ones_like(out.mask, dtype=torch.long)], 1)
    p, t = prompts.shape[1], out.completions.shape[1]
    logp_s, logp_t = (torch.log_softmax(forward_logits(m, ids, attn)[:, p - 1:p - 1 + t], -1) for m in (model, teacher))
    w = out.mask.float()
    want = ((logp_s.exp() * (logp_s - logp_t)).sum(-1) * w).sum(1) / w.sum(1)
    assert bool((want > 0).all())                                   # two different models: a real distance
    assert torch.allclose(out.extra, want.double(), atol=1e-5, rtol=1e-4)


def test_every_batch_of_prompts_reports_progress(tmp_path):
    """A long evaluation beats once per batch (a role's heartbeat: the supervisor takes 180 s of silence
    for a hang, and 512 prompts of a real model on 2 loaded cores take longer), and the beat changes nothing."""
    model, vocab = _model("chat", tmp_path)
    model.eval()
    rows, answers = _rows(vocab, vocab - 1)
    beats: list[int] = []
    out = greedy_scored(model, rows, answers, 6, eos_id=vocab - 2, pad_id=vocab - 1, batch=2,
                        on_batch=lambda: beats.append(1))
    plain = greedy_scored(model, rows, answers, 6, eos_id=vocab - 2, pad_id=vocab - 1, batch=2)
    assert len(beats) == 3                                            # 5 prompts in batches of 2
    assert torch.equal(out.completions, plain.completions) and torch.equal(out.answer_logprob, plain.answer_logprob)

def test_chat_task_records_every_prompt():
    from harness.tasks.chat import ChatRewardTask

    tok = Tokenizer(chat_tokenizer())
    cfg = {"name": "reward", "format": "chat", "ops": ["+", "-"], "temperature": 1.0, "max_new_tokens": 4,
           "samples_per_prompt": 2, "eval_prompts": 12, "eval_batch": 5, "eval_split": "test", "clip_eps": 0.2,
           "kl_coef": 0.0, "reward_shaping": "none",
           "chat": {"low": 0, "high": 30, "test_percent": 20, "validation_percent": 10, "instruction": ""}}
    task = ChatRewardTask(cfg, tok)
    model = chat_model(tok.vocab_size, seed=1).eval()
    metrics, frame = task.evaluate_prompts(model, 12)
    assert len(frame) == 12 and list(frame["prompt"]) == list(range(12))
    assert set(frame.columns) >= {"a", "op", "b", "correct", "ended", "answer", "answer_logprob", "reward"}
    assert metrics["accuracy"] == pytest.approx(frame["correct"].mean())
    assert metrics["answer_logprob"] == pytest.approx(frame["answer_logprob"].mean())
    spec = task.spec
    problems = Problems(torch.tensor(frame["a"].tolist()), torch.tensor([("+-*").index(o) for o in frame["op"]]),
                        torch.tensor(frame["b"].tolist()))
    assert bool((spec.split_of(problems) == 2).all())              # every evaluated problem is a test problem
    # the same prompts through the plain path: the same verdicts
    prompts = ChatPrompts(spec, tok).encode(problems)
    comp, mask, _ = sample(model, prompts, prompts != tok.pad_id, 4, group=1, eos_id=tok.eos_id, pad_id=tok.pad_id)
    assert frame["correct"].tolist() == task.chat.correct(prompts, comp, mask).tolist()


def test_split_shares_follow_the_config():
    counts = {}
    for test in (10, 20):
        spec = ChatSpec(low=0, high=50, ops=("+", "-"), words=False, instruction="", system=None,
                        test_percent=test, validation_percent=10)
        counts[test] = {s: len(spec.all_problems(s).a) for s in ("train", "validation", "test")}
        assert sum(counts[test].values()) == 2 * 51 * 51
    assert counts[20]["test"] > 1.6 * counts[10]["test"]
    assert abs(counts[20]["validation"] - counts[10]["validation"]) < 0.2 * counts[10]["validation"]
