"""Timing shared by the benchmarks: the median of repeated calls, each waited for."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(
    fn: Callable[[], object],
    reps: int,
    sync: Callable[[], None],
    warmup: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median seconds of |reps| calls of |fn| after |warmup| calls; |sync| waits
    for the device after each. With clock=time.process_time it is the
    process's CPU time (all threads), steadier on a shared machine."""
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(reps):
        t0 = clock()
        fn()
        sync()
        times.append(clock() - t0)
    return statistics.median(times)
