"""The one fan-out helper: run one job per peer concurrently (concurrent.futures threads).

Jobs here are blocking transfers (gloo send/recv release the GIL), so threads are the right
tool; results come back in job order. ``capture=True`` returns an exception as that job's
result (a failed peer is data, e.g. for a federated drop policy); otherwise the first error
is raised once every job has ended.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")


def fan_out(jobs: Sequence[Callable[[], T]], *, capture: bool = False, name: str = "fanout") -> list:
    """Run every job in its own thread and return their results in order (see module doc)."""
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix=name) as pool:
        futures = [pool.submit(job) for job in jobs]
    results: list = []
    for future in futures:
        err = future.exception()
        if err is not None and not capture:
            raise err
        results.append(err if err is not None else future.result())
    return results
