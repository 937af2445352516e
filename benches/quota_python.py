"""Python, global mode against a real Redis (its URL is the first argument):
flowctrl try_acquire+release with a global_rate, against the `limits`
package's FixedWindowRateLimiter over RedisStorage (one EVALSHA round trip
per hit), in one run. Prints a Markdown table: median calls/s of 5 runs."""

import os
import statistics
import sys
import tempfile
import time

import flowctrl
from limits import RateLimitItemPerSecond
from limits.storage import RedisStorage
from limits.strategies import FixedWindowRateLimiter

RUNS = 5
SECONDS = 1.0


def per_second(call):
    rates = []
    for _ in range(RUNS):
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < SECONDS:
            for _ in range(100):
                call()
            n += 100
        rates.append(n / elapsed)
    return statistics.median(rates)


def main():
    url = sys.argv[1]
    path = os.path.join(tempfile.mkdtemp(), "table")
    task = flowctrl.Table(path, store=url).task("py", global_rate=1e9)

    def flowctrl_pair():
        p = task.try_acquire()
        if p is not None:
            p.release()

    limiter = FixedWindowRateLimiter(RedisStorage(url))
    item = RateLimitItemPerSecond(1_000_000_000)

    def limits_hit():
        limiter.hit(item, "py")

    ours, theirs = per_second(flowctrl_pair), per_second(limits_hit)
    print("| Python, one process | calls/s (median of 5 × 1 s) | vs `limits` |")
    print("|---|---:|---:|")
    print(f"| `limits` FixedWindowRateLimiter(RedisStorage).hit | {theirs:,.0f} | 1.0× |")
    print(f"| flowctrl try_acquire + release, global_rate via Redis | {ours:,.0f} | {ours / theirs:,.0f}× |")


if __name__ == "__main__":
    main()
