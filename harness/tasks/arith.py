"""The synthetic language: fixed-width integer arithmetic with a verifiable answer.

A problem is ``(a, op, b)`` with operands ``0 <= a, b < 10**digits`` and ``op`` in ``ops``
(``+ - *``). Its prompt is the operands zero-padded to ``digits`` characters, e.g.
``"07+58="`` (every prompt of a task has the same length), and its answer is the exact
result in plain decimal, e.g. ``"65"``, ``"-51"`` for ``"07-58="``, followed by eos.

Splits: a problem is held out for evaluation when a fixed hash of ``(a, op, b)`` falls in
the lowest ``EVAL_PERCENT`` percent; training prompts and pretraining data never contain
an evaluation problem, whatever the seed.

Sub-distributions (federated non-IID splits, the student's narrower pretraining): the
category of a problem is ``(op, hard)``, where ``hard`` means the digit-by-digit answer
(each column computed alone, mod 10, no carries or borrows) is not the true answer: an
addition with a carry, a subtraction with a borrow or a negative result, almost every
multiplication. ``easy`` problems are solvable column by column.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

OPS = ("+", "-", "*")
EVAL_PERCENT = 10
_PROMPT = re.compile(r"^(\d+)([+\-*])(\d+)=$")


@dataclass(frozen=True)
class Problems:
    """A batch of problems as int64 tensors of equal length ``n``; ``op`` indexes ``OPS``."""
    a: torch.Tensor
    op: torch.Tensor
    b: torch.Tensor

    def __len__(self) -> int:
        return int(self.a.numel())


class Arithmetic:
    """The language of ``digits``-digit problems over ``ops``."""

    def __init__(self, digits: int, ops: list[str] | tuple[str, ...], reverse: bool = False) -> None:
        if not isinstance(digits, int) or not 1 <= digits <= 6:
            raise ValueError(f"task.digits: {digits!r} is not allowed; choose an integer 1..6")
        bad = [o for o in ops if o not in OPS]
        if bad or not ops:
            raise ValueError(f"task.ops: {list(ops)!r} is not allowed; choose a non-empty subset of {list(OPS)}")
        self.digits = digits
        self.ops = tuple(ops)
        self.op_ids = torch.tensor([OPS.index(o) for o in self.ops], dtype=torch.long)
        self.limit = 10 ** digits
        self.reverse = bool(reverse)

    @property
    def max_answer_len(self) -> int:
        """Characters of the longest answer (sign included)."""
        return max(2 * self.digits if "*" in self.ops else 0, self.digits + 1)

    # -- categories and splits -------------------------------------------------------------
    @property
    def categories(self) -> list[tuple[str, bool]]:
        """``(op, hard)`` pairs in category-index order: index = 2 * ops.index(op) + hard."""
        return [(o, h) for o in self.ops for h in (False, True)]

    def answers(self, p: Problems) -> torch.Tensor:
        return torch.where(p.op == 0, p.a + p.b, torch.where(p.op == 1, p.a - p.b, p.a * p.b))

    def naive_answers(self, p: Problems) -> torch.Tensor:
        """The column-by-column answer: each digit column computed alone, mod 10, no carries
        or borrows (07+58 -> 55, 07-58 -> 59). The student's systematic misconception."""
        naive = torch.zeros_like(p.a)
        scale = 1
        for _ in range(self.digits):
            da, db = (p.a // scale) % 10, (p.b // scale) % 10
            col = torch.where(p.op == 0, da + db, torch.where(p.op == 1, da - db, da * db)) % 10
            naive = naive + col * scale
            scale *= 10
        return naive

    def hard(self, p: Problems) -> torch.Tensor:
        """True where the column-by-column answer (``naive_answers``) is wrong."""
        return self.naive_answers(p) != self.answers(p)

    def category(self, p: Problems) -> torch.Tensor:
        """Category index per problem (see ``categories``)."""
        local = (p.op.unsqueeze(1) == self.op_ids.unsqueeze(0)).long().argmax(1)
        return 2 * local + self.hard(p).long()

    def is_eval(self, p: Problems) -> torch.Tensor:
        """The held-out split: a fixed integer hash of (a, op, b), independent of any seed."""
        h = (p.a * 1_000_003 + p.b) * 4 + p.op
        for mult in (0x9E3779B1, 0x85EBCA6B, 0xC2B2AE35):
            h = ((h ^ (h >> 16)) * mult) & 0xFFFFFFFF
        return (h % 100) < EVAL_PERCENT

    # -- sampling ------------------------------------------------------------------------------
    def sample(self, split: str, n: int, generator: torch.Generator,
               easy_frac: float = 0.0) -> Problems:
        """``n`` problems of ``split`` ("train" | "eval"), operands and op uniform.

        ``easy_frac`` > 0 skews the draw: each problem is, with that probability, drawn from
        the easy sub-distribution only (the student's narrower pretraining data).
        """
        if split not in ("train", "eval"):
            raise ValueError(f"split: {split!r} is not allowed; choose train or eval")
        want_eval = split == "eval"
        easy_row = torch.rand(n, generator=generator) < easy_frac if easy_frac > 0 else torch.zeros(n, dtype=torch.bool)
        need = torch.ones(n, dtype=torch.bool)
        a = torch.zeros(n, dtype=torch.long)
        b = torch.zeros(n, dtype=torch.long)
        op = torch.zeros(n, dtype=torch.long)
        for _ in range(1000):
            m = int(need.sum())
            if m == 0:
                break
            cand = Problems(torch.randint(0, self.limit, (m,), generator=generator),
                            self.op_ids[torch.randint(0, len(self.ops), (m,), generator=generator)],
                            torch.randint(0, self.limit, (m,), generator=generator))
            ok = self.is_eval(cand) == want_eval
            ok &= ~(easy_row[need] & self.hard(cand))
            idx = need.nonzero().squeeze(1)[ok]
            a[idx], b[idx], op[idx] = cand.a[ok], cand.b[ok], cand.op[ok]
            need[idx] = False
        if bool(need.any()):
            raise ValueError(f"task: cannot draw {split} problems (digits={self.digits}, ops={self.ops})")
        return Problems(a, op, b)

    def all_problems(self, split: str) -> Problems:
        """Every problem of ``split`` (for small languages; 10**(2*digits) * len(ops) rows)."""
        if self.digits > 3:
            raise ValueError(f"task.digits: {self.digits} is too large to enumerate (at most 3)")
        grid = torch.arange(self.limit)
        a = grid.repeat_interleave(self.limit).repeat(len(self.ops))
        b = grid.repeat(self.limit).repeat(len(self.ops))
        op = self.op_ids.repeat_interleave(self.limit * self.limit)
        p = Problems(a, op, b)
        keep = self.is_eval(p) == (split == "eval")
        return Problems(a[keep], op[keep], b[keep])

    # -- text ------------------------------------------------------------------------------------
    def prompt_text(self, p: Problems) -> list[str]:
        w = self.digits
        return [f"{a:0{w}d}{OPS[o]}{b:0{w}d}=" for a, o, b in zip(p.a.tolist(), p.op.tolist(), p.b.tolist())]

    def answer_text(self, p: Problems, values: torch.Tensor | None = None) -> list[str]:
        """Decimal answers (or ``values``); with ``reverse`` the digits come least significant
        first (the sign first)."""
        values = self.answers(p) if values is None else values
        if not self.reverse:
            return [str(v) for v in values.tolist()]
        return [("-" if v < 0 else "") + str(abs(v))[::-1] for v in values.tolist()]

    def parse(self, prompts: list[str]) -> Problems:
        """Problems of prompt texts like ``"07+58="``; ValueError on anything else."""
        a, op, b = [], [], []
        for text in prompts:
            m = _PROMPT.match(text)
            if m is None:
                raise ValueError(f"task: {text!r} is not a prompt of the arithmetic language")
            a.append(int(m.group(1)))
            op.append(OPS.index(m.group(2)))
            b.append(int(m.group(3)))
        return Problems(torch.tensor(a, dtype=torch.long), torch.tensor(op, dtype=torch.long),
                        torch.tensor(b, dtype=torch.long))
