"""Python keyed try_acquire + release against the `limits` package (moving
window, memory storage, `hit()`), on the same keys in the same run: one hot
key and 100,000 keys uniform. Medians of 5 passes; prints a Markdown table.
Run: .venv/bin/python benches/keyed_python.py (scripts/setup.sh makes the venv)."""

import os
import random
import statistics
import tempfile
import time

import flowctrl
from limits import parse, storage, strategies

OPS = 200_000
KEYS = 100_000


def passes(f, keys):
    runs = []
    for _ in range(5):
        began = time.perf_counter()
        f(keys)
        runs.append((time.perf_counter() - began) / len(keys) * 1e9)
    return statistics.median(runs)


def main():
    path = os.path.join(tempfile.mkdtemp(), "t")
    table = flowctrl.Table(path)
    task = table.task("bench")
    task.set_keys("1000000000/second", capacity=2 * KEYS)
    limit = parse("1000000000/second")
    mw = strategies.MovingWindowRateLimiter(storage.MemoryStorage())

    def ours(keys):
        for k in keys:
            p = task.try_acquire(key=k)
            if p is not None:
                p.release()

    def theirs(keys):
        for k in keys:
            mw.hit(limit, k)

    rng = random.Random(7)
    cases = [
        ("1 hot key", ["hot"] * OPS),
        ("100 k keys, uniform", [f"k{rng.randrange(KEYS)}" for _ in range(OPS)]),
    ]
    print("| case | flowctrl ns | limits ns | ratio (limits / flowctrl) |")
    print("|---|---|---|---|")
    for name, keys in cases:
        ours(keys)
        theirs(keys[: OPS // 10])
        f = passes(ours, keys)
        g = passes(theirs, keys[: OPS // 10])
        print(f"| {name} | {f:.0f} | {g:.0f} | {g / f:.1f} |")
    table.close()


if __name__ == "__main__":
    main()
