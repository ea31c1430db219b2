"""Spar's Gram matrices while backward runs (``compressor.options.backward_grams=true``; hilo).

HiLo's learner encodes x = c*g + e for every adapter matrix: g its gradient, c the clipping
factor (``onpolicy.clip_norm``: known only once the whole gradient is) and e the error-feedback
residual left by the previous update. Spar starts with the small Gram matrix of every x
(r x r, r = min(m, n): harness.compress.spar), the part of its encode that grows with the
model's width. Since

    Gram(c g + e) = c^2 Gram(g) + c (X(g, e) + X(g, e)^T) + Gram(e),
    Gram(a) = X(a, a),  X(a, b) = a b^T (m <= n) or a^T b (m > n),

every term but c is known as soon as g is. A post-accumulate-grad hook hands each adapter
gradient to one side thread the moment backward produces it; the thread computes Gram(g),
X(g, e) + X(g, e)^T and Gram(e) while backward goes on with the earlier layers (torch releases
the GIL inside each product, so on a CPU the thread runs on a core the learner's one compute
thread leaves idle; on a GPU it would be a side stream). After backward the learner waits for
the thread (``wait``: before clipping scales the gradients in place), and ``grams(c)`` combines
the pieces: what is left on the path after the last layer is one scaled sum of r x r matrices
per size, then the spectra, the allocation and the packing.

What it costs and changes, written down:
- three products per matrix instead of one (``X(g, e)`` and ``Gram(e)`` too), all on the side
  thread;
- the combined matrices equal Gram(x) up to floating-point rounding, not bit for bit: the
  payloads differ from the default path's in the last bits of the factors (or in a rank where
  two energies nearly tie). Learner and workers still decode the same bytes and stay
  bit-identical (verified as always); the option is off by default, so the reference
  trajectories do not move;
- a gradient accumulated twice in one backward (a parameter used twice) is handed over twice;
  the thread works in order, so its pieces are those of the final gradient;
- the thread lives for one backward: the first gradient starts it and ``wait`` ends it, so no
  thread outlives an update (a process with threads cannot safely fork: the launcher would fall
  back to exec for roles started from it).
Measured: docs/onpolicy.md, "Spectra during backward".
"""
from __future__ import annotations

import functools
import queue
import threading
from typing import Callable

import torch
from torch import Tensor

from harness.compress.spar import cross as _cross, matrix_shape     # X(a, b) above


class BackwardGrams:
    """The Gram pieces of every adapter matrix of ``params``, computed on a side thread as backward
    produces the gradients. ``residual()`` returns the error-feedback residual (name -> tensor;
    empty without error feedback) that the next encode adds to the gradients."""

    def __init__(self, params: dict[str, torch.nn.Parameter], residual: Callable[[], dict[str, Tensor]]):
        self._residual = residual
        self.names = [n for n, p in params.items() if matrix_shape(tuple(p.shape)) is not None]
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._pieces: dict[str, tuple[Tensor, Tensor | None, Tensor | None]] = {}
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._handles = [params[n].register_post_accumulate_grad_hook(functools.partial(self._ready, n))
                         for n in self.names]

    def __deepcopy__(self, memo) -> "BackwardGrams":
        """A copy that collects nothing (a warm-up's sandbox sets gradients without backward)."""
        return BackwardGrams({}, dict)

    def _ready(self, name: str, param: torch.nn.Parameter) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name="backward-grams")
            self._thread.start()
        self._jobs.put((name, param.grad))

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:                  # wait(): every gradient handed over is done
                return
            name, grad = job
            try:
                self._pieces[name] = self._products(name, grad)
            except BaseException as err:     # noqa: BLE001 - raised by wait() in the learner's thread
                self._error = err

    def _products(self, name: str, grad: Tensor) -> tuple[Tensor, Tensor | None, Tensor | None]:
        m, n = matrix_shape(tuple(grad.shape))
        g = grad.detach().reshape(m, n).float()
        gg = _cross(g, g)
        e = self._residual().get(name)
        if e is None:
            return gg, None, None
        e = e.detach().reshape(m, n).to(g)
        ge = _cross(g, e)
        return gg, ge + ge.mT, _cross(e, e)

    def wait(self) -> None:
        """Return once every gradient handed over so far is done (call before anything changes
        the gradients in place), the side thread ended; re-raises its error, if any."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None
        if self._error is not None:
            err, self._error = self._error, None
            self._pieces.clear()
            raise err

    def grams(self, scale: float = 1.0) -> dict[str, Tensor] | None:
        """Gram(scale * g + e) for every matrix, from this backward's pieces (then forgotten); None
        when some matrix has none (no backward since the last call): the encode computes them."""
        self.wait()
        pieces, self._pieces = self._pieces, {}
        if not self.names or any(n not in pieces for n in self.names):
            return None
        out: dict[str, Tensor] = {}
        by_size: dict[tuple[int, bool], list[str]] = {}
        for n in self.names:
            gg, cross, _ = pieces[n]
            by_size.setdefault((gg.shape[-1], cross is not None), []).append(n)
        for (_, with_residual), names in by_size.items():
            gram = torch.stack([pieces[n][0] for n in names]).mul_(scale * scale)
            if with_residual:
                gram.add_(torch.stack([pieces[n][1] for n in names]), alpha=scale)
                gram.add_(torch.stack([pieces[n][2] for n in names]))
            out.update(zip(names, gram.unbind(0)))
        return out
