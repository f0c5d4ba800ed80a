"""Shared timing helper of the benchmark scripts (run them as ``python benchmarks/<x>.py``)."""

import time


def best_time(function, repeats=3, warmup=True):
    """Smallest wall time in seconds of ``repeats`` calls of ``function()``.

    One untimed call first when ``warmup``, so that caches and lazy imports settle.
    """
    if warmup:
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)
