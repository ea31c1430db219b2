"""The synthetic language and its tokenizer: round-trip, answers, categories, splits."""
from __future__ import annotations

import pytest
import torch

from harness.tasks.arith import Arithmetic, Problems
from harness.tasks.tokenizer import CHARS, SPECIALS, Tokenizer


def one(a: int, op: int, b: int) -> Problems:
    return Problems(torch.tensor([a]), torch.tensor([op]), torch.tensor([b]))


def test_tokenizer_round_trip(tok):
    assert tok.vocab_size == len(SPECIALS) + len(CHARS) == 18
    for text in ["07+58=", "-51", "0123456789+-*=", ""]:
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode("07+58=")) == 6
    ids = [tok.bos_id] + tok.encode("12*3=") + [tok.eos_id, tok.pad_id]
    assert tok.decode(ids) == "12*3="          # specials dropped


def test_tokenizer_rejects_unknown_characters(tok):
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.encode("1/2=")


def test_tokenizer_save_load(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    back = Tokenizer.from_pretrained(tmp_path)
    assert (back.vocab_size, back.pad_id, back.bos_id, back.eos_id) == (tok.vocab_size, tok.pad_id, tok.bos_id, tok.eos_id)
    assert back.encode("99-12=") == tok.encode("99-12=")
    with pytest.raises(ValueError):
        back.encode("x")


@pytest.mark.parametrize("a,op,b,answer,hard", [
    (21, 0, 34, 55, False), (7, 0, 58, 65, True),   # 7+8 carries
    (58, 1, 7, 51, False), (52, 1, 17, 35, True),   # 2-7 borrows
    (7, 1, 58, -51, True),                          # negative
    (3, 2, 2, 6, False), (12, 2, 3, 36, True),     # columns alone: 06, not 36
])
def test_answers_and_categories(a, op, b, answer, hard):
    lang = Arithmetic(2, ["+", "-", "*"])
    p = one(a, op, b)
    assert int(lang.answers(p)) == answer
    assert bool(lang.hard(p)) == hard
    assert int(lang.category(p)) == 2 * op + hard
    assert lang.categories[2 * op + hard] == ("+-*"[op], hard)


def test_text_forms():
    lang = Arithmetic(2, ["+", "-"])
    p = Problems(torch.tensor([7, 7]), torch.tensor([0, 1]), torch.tensor([58, 58]))
    assert lang.prompt_text(p) == ["07+58=", "07-58="]
    assert lang.answer_text(p) == ["65", "-51"]
    rev = Arithmetic(2, ["+", "-"], reverse=True)
    assert rev.answer_text(p) == ["56", "-15"]
    back = lang.parse(["07+58=", "07-58="])
    assert torch.equal(back.a, p.a) and torch.equal(back.op, p.op) and torch.equal(back.b, p.b)
    with pytest.raises(ValueError, match="not a prompt"):
        lang.parse(["7+="])


def test_bad_language_config():
    with pytest.raises(ValueError, match="task.digits"):
        Arithmetic(0, ["+"])
    with pytest.raises(ValueError, match="task.ops"):
        Arithmetic(2, ["/"])


def test_splits_are_disjoint_fixed_and_about_ten_percent():
    lang = Arithmetic(2, ["+", "-"])
    train, held = lang.all_problems("train"), lang.all_problems("eval")
    assert len(train) + len(held) == 2 * 100 * 100
    assert 0.07 < len(held) / 20000 < 0.13
    gen = torch.Generator().manual_seed(0)
    assert not bool(lang.is_eval(lang.sample("train", 500, gen)).any())
    assert bool(lang.is_eval(lang.sample("eval", 500, gen)).all())


def test_sampling_is_deterministic_and_easy_frac_skews():
    lang = Arithmetic(2, ["+", "-"])
    a = lang.sample("train", 300, torch.Generator().manual_seed(5))
    b = lang.sample("train", 300, torch.Generator().manual_seed(5))
    assert torch.equal(a.a, b.a) and torch.equal(a.op, b.op) and torch.equal(a.b, b.b)
    easy = lang.sample("train", 300, torch.Generator().manual_seed(5), easy_frac=1.0)
    assert not bool(lang.hard(easy).any())
    assert float(lang.hard(a).float().mean()) > 0.5


def test_naive_answers_are_the_column_by_column_misconception():
    lang = Arithmetic(2, ["+", "-"])
    p = Problems(torch.tensor([7, 7, 21]), torch.tensor([0, 1, 0]), torch.tensor([58, 58, 34]))
    assert lang.naive_answers(p).tolist() == [55, 59, 55]
    assert lang.hard(p).tolist() == [True, True, False]
    assert lang.answer_text(p, lang.naive_answers(p)) == ["55", "59", "55"]
