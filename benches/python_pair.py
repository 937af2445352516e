"""Python: flowctrl try_acquire+release against the `limits` package's
FixedWindowRateLimiter over MemoryStorage, in one run. Prints JSON medians
(ns per call pair / per hit) over several repeats."""

import json
import os
import statistics
import tempfile
import time

import flowctrl
from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter

CALLS = 200_000
REPEATS = 9


def per_call_ns(loop):
    runs = []
    for _ in range(REPEATS):
        t0 = time.perf_counter_ns()
        loop(CALLS)
        runs.append((time.perf_counter_ns() - t0) / CALLS)
    return statistics.median(runs)


def main():
    path = os.path.join(tempfile.mkdtemp(), "table")
    # Limits far above the loop's pace: every call admitted, full work done.
    task = flowctrl.Table(path).task("bench", local_rate=1e9, burst=1_000_000)

    def flowctrl_pairs(n):
        acquire = task.try_acquire
        for _ in range(n):
            acquire().release()

    limiter = FixedWindowRateLimiter(MemoryStorage())
    item = RateLimitItemPerSecond(1_000_000_000)

    def limits_hits(n):
        hit = limiter.hit
        for _ in range(n):
            hit(item, "bench")

    result = {
        "flowctrl_try_acquire_release_ns": per_call_ns(flowctrl_pairs),
        "limits_fixed_window_hit_ns": per_call_ns(limits_hits),
    }
    os.remove(path)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
