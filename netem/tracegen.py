"""Generate the shipped link traces (netem/traces/*.csv) by a documented, seeded process.

    python -m netem.tracegen [--out netem/traces] [--seed 16] [--check]

Both are compressed in time so that they matter within a short run, and loop.

lte_uplink (60 s, 0.5 s steps): a Markov-modulated LTE-like uplink. A hidden channel state
  (good / fair / poor / edge) follows a Markov chain with per-step transition matrix P below
  (sticky: a state lasts ~2-5 s on average); each step's rate is the state's median rate
  times a log-normal factor (sigma 0.25), clipped to [0.1, 20] Mbit/s; the one-way delay is
  the state's base delay plus an exponential queueing term (mean 10% of the base). Shapes
  after cellular measurement studies (uplinks of a few Mbit/s with deep fades); not a
  recording of any network.
broadband_diurnal (48 s, 1 s steps = 30 min of a day): a 50 Mbit/s broadband downlink whose
  evening peak (busy hour 21:00) leaves 35% of the rate: rate = 50 * (1 - 0.65 * busy(h)),
  busy(h) = exp(-((h - 21) / 2.5)^2) (wrapped around midnight), times a log-normal factor
  (sigma 0.05); delay 10 ms + 25 ms * busy(h).

Users bring recorded traces (CSV or Mahimahi, netem/trace.py); these only give every
checkout the same varying links. ``--check`` regenerates into memory and fails when the
shipped files differ (the generator and the files must agree).
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

from netem.trace import SHIPPED, parse_csv

LTE_STATES = ("good", "fair", "poor", "edge")
LTE_RATE_MBIT = (8.0, 3.0, 1.0, 0.3)          # median rate per state
LTE_DELAY_MS = (25.0, 35.0, 60.0, 120.0)      # base one-way delay per state
LTE_P = ((0.85, 0.12, 0.03, 0.00),            # per 0.5 s step, rows sum to 1
         (0.10, 0.80, 0.08, 0.02),
         (0.03, 0.15, 0.75, 0.07),
         (0.00, 0.10, 0.30, 0.60))
LTE_STEP_S, LTE_LENGTH_S = 0.5, 60.0
DAY_STEP_S, DAY_LENGTH_S = 1.0, 48.0           # 48 steps = 24 h at 30 min per step


def lte_uplink(seed: int) -> str:
    rng = random.Random(f"lte_uplink/{seed}")
    state, lines = 0, ["# lte_uplink: Markov-modulated LTE-like uplink (python -m netem.tracegen; see its docstring)",
                       "t_s,rate_mbit,delay_ms"]
    for i in range(int(LTE_LENGTH_S / LTE_STEP_S)):
        rate = min(20.0, max(0.1, LTE_RATE_MBIT[state] * math.exp(rng.gauss(0.0, 0.25))))
        delay = LTE_DELAY_MS[state] * (1.0 + rng.expovariate(10.0))
        lines.append(f"{i * LTE_STEP_S:g},{rate:.3f},{delay:.1f}")
        state = rng.choices(range(len(LTE_STATES)), weights=LTE_P[state])[0]
    lines.append(f"{LTE_LENGTH_S:g},loop")
    return "\n".join(lines) + "\n"


def broadband_diurnal(seed: int) -> str:
    rng = random.Random(f"broadband_diurnal/{seed}")
    lines = ["# broadband_diurnal: a day of a 50 Mbit/s link in 48 s (python -m netem.tracegen; see its docstring)",
             "t_s,rate_mbit,delay_ms"]
    for i in range(int(DAY_LENGTH_S / DAY_STEP_S)):
        hour = i * 24.0 / (DAY_LENGTH_S / DAY_STEP_S)
        distance = min(abs(hour - 21.0), 24.0 - abs(hour - 21.0))
        busy = math.exp(-((distance / 2.5) ** 2))
        rate = 50.0 * (1.0 - 0.65 * busy) * math.exp(rng.gauss(0.0, 0.05))
        lines.append(f"{i * DAY_STEP_S:g},{rate:.3f},{10.0 + 25.0 * busy:.1f}")
    lines.append(f"{DAY_LENGTH_S:g},loop")
    return "\n".join(lines) + "\n"


GENERATORS = {"lte_uplink": lte_uplink, "broadband_diurnal": broadband_diurnal}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m netem.tracegen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SHIPPED, help="folder for NAME.csv (default: netem/traces)")
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    args = parser.parse_args(argv)
    differ = []
    for name, make in GENERATORS.items():
        text, path = make(args.seed), args.out / f"{name}.csv"
        trace = parse_csv(text, name)
        summary = (f"{name}: {len(trace.starts_s)} steps, loops every {trace.period_s:g} s, mean "
                   f"{trace.mean_rate_bps() / 1e6:.2f} Mbit/s, range {min(trace.rates_bps) / 1e6:.2f}-"
                   f"{trace.max_rate_bps / 1e6:.2f} Mbit/s")
        if args.check:
            same = path.is_file() and path.read_text() == text
            differ += [] if same else [str(path)]
            print(f"{'same' if same else 'DIFFERS'} {path}  ({summary})")
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}  ({summary})")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
