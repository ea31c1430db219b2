"""Replay link traces on the kernel: `tc change` of each traced direction's root qdisc, on schedule.

One daemon thread per topology (StarTopology starts it once the links are up and stops it
before the namespaces go) walks every traced direction's schedule relative to a common start
``t0`` (wall clock, seconds since the epoch, = StarTopology.t0) and changes the installed tbf
(tc backend: rate and burst) or netem qdisc (rate and delay) through pyroute2. The queue
limit stays as planned (sized for the trace's peak rate).

What it guarantees: each change is issued no earlier than its time; how late is recorded
per change (``changes``: (t_s, direction, rate_bps, late_s)). The thread asks for SCHED_FIFO
(lowest real-time priority; granted to root) so that a busy machine does not delay its
wake-ups; it sleeps between changes. Only this thread is real-time: role processes forked
from the launcher's main thread keep the normal policy. tbf refills its bucket on every change, so a saturated link gets up to
BURST_S (4 ms) of traffic extra per change: +1.6% at Mahimahi's 0.25 s steps, nothing
measurable at steps of seconds.
"""
from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass

from netem.shaping import Qdisc, apply, retune
from netem.trace import Trace, load

EPS_S = 1e-9         # a step's rate is looked up just after its boundary
RT_PRIORITY = 1      # SCHED_FIFO priority of the replay thread (the lowest real-time one)


@dataclass(frozen=True)
class Target:
    """One traced direction: the interface whose root qdisc carries it."""

    label: str           # e.g. 'w0.up'
    netns: str
    ifname: str
    qdisc: Qdisc         # as installed by shaping.plan (first rate of the trace)
    trace_path: str

    @property
    def trace(self) -> Trace:
        return load(self.trace_path)


class TraceReplay:
    """Changes the root qdiscs of ``targets`` on their traces' schedules from ``t0`` until stop()."""

    def __init__(self, targets: list[Target], t0: float):
        self.targets, self.t0 = list(targets), float(t0)
        self.changes: list[tuple[float, str, float, float]] = []
        self.errors: list[str] = []
        self.realtime = False        # whether the thread got SCHED_FIFO (root): wakes on time under CPU load
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="netem-trace-replay")

    def start(self) -> "TraceReplay":
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop changing qdiscs (idempotent); returns once the thread is gone or timeout_s passed."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        from pyroute2 import IPRoute

        handles: dict[str, object] = {}
        try:        # this thread only (pid 0 = the caller); it sleeps between changes, so it never hogs a core
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
            self.realtime = True
        except (AttributeError, OSError):
            pass
        try:
            traces = [t.trace for t in self.targets]
            for target in self.targets:          # opened before the first change is due: no lateness from setup
                if target.netns not in handles:
                    handles[target.netns] = IPRoute(netns=target.netns, flags=0)
            due = [trace.next_change_s(0.0) for trace in traces]
            current = [(trace.rate_at(0.0), trace.delay_at(0.0)) for trace in traces]
            while due and not self._stop.is_set():
                i = min(range(len(due)), key=due.__getitem__)
                if math.isinf(due[i]):
                    self._stop.wait()
                    break
                if self._stop.wait(max(0.0, self.t0 + due[i] - time.time())):
                    break
                at, target, trace = due[i], self.targets[i], traces[i]
                due[i] = trace.next_change_s(at + EPS_S)
                wanted = (trace.rate_at(at + EPS_S), trace.delay_at(at + EPS_S))
                if wanted == current[i]:
                    continue
                ipr = handles[target.netns]
                index = ipr.link_lookup(ifname=target.ifname)[0]
                apply(ipr, index, [retune(target.qdisc, *wanted)], command="change")
                current[i] = wanted
                self.changes.append((at, target.label, wanted[0], time.time() - self.t0 - at))
        except Exception as err:  # noqa: BLE001 - a torn-down namespace ends the replay; said in errors
            if not self._stop.is_set():
                self.errors.append(f"{type(err).__name__}: {err}")
        finally:
            for ipr in handles.values():
                try:
                    ipr.close()
                except Exception:  # noqa: BLE001
                    pass

    def describe(self) -> dict:
        """For run.json: what was replayed and how late the changes came."""
        late = sorted(c[3] for c in self.changes)
        return {"t0": self.t0, "directions": {t.label: t.trace_path for t in self.targets},
                "changes": len(self.changes), "late_s_median": late[len(late) // 2] if late else None,
                "late_s_max": late[-1] if late else None, "realtime": self.realtime, "errors": list(self.errors)}
