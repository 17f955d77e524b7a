"""Timing shared by the benchmark scripts (run as `python bench/NAME.py`, so this imports as `timing`)."""
import time

import numpy as np


def interleaved(fns: dict, reps: int) -> dict:
    """Median seconds per callable, after a warm-up, alternating between them each repetition."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(t)) for name, t in times.items()}
