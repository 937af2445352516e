"""Writes benches/WAITING.md from what scripts/bench-waiting.sh measured.

    report.py RESULTS_DIR > benches/WAITING.md

RESULTS_DIR holds meta.json (the run's settings, machine and commands),
fastpath.txt ("<lib> <task> <ns/op> <limited>" per run) and one directory
per load run, <case>-<variant>-<k>, whose files hold one line per request:
"start_ns wait_ns hold_ns ok extra_ns" (extra: the schedule's lag for the
open loop, the round trip for the Python client).

Every figure of a case is the median over its runs of that figure; budgets
are judged on the medians, and the runs are listed too.
"""

import glob
import json
import os
import statistics
import sys

RESULTS = sys.argv[1]
META = json.load(open(os.path.join(RESULTS, "meta.json")))
WARMUP = META["warmup_s"] * 1e9
CAP = 4
NS = 1e6  # ns per ms


def load(run_dir):
    rows = []
    for name in sorted(glob.glob(os.path.join(run_dir, "s*"))):
        with open(name) as f:
            rows += [tuple(int(x) for x in line.split()) for line in f if line.strip()]
    return rows


def pct(values, p):
    """The p-th percentile (nearest rank) of values."""
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(round(p / 100 * len(values) + 0.5)) - 1))]


def runs(case, variant):
    dirs = glob.glob(os.path.join(RESULTS, f"{case}-{variant}-*"))
    return [load(d) for d in sorted(dirs, key=lambda d: int(d.rsplit("-", 1)[1]))]


def closed_stats(rows, seconds, clients):
    """A closed loop: every client asks again at once."""
    end = seconds * 1e9
    window = [r for r in rows if WARMUP <= r[0] < end]
    ok = [r for r in window if r[3]]
    served = sum(1 for r in rows if r[3] and WARMUP <= r[0] + r[1] < end)
    hold = statistics.mean(r[2] for r in ok) / NS
    waits = [r[1] / NS for r in window]
    # The cap is always in demand: the k-th grant follows the (k - cap)-th
    # release. Their distance is what handing a permit over costs (the
    # release is timed after fc_release returns: slightly negative when a
    # release frees the permit to a waiter before returning).
    grants = sorted(r[0] + r[1] for r in ok)
    releases = sorted(r[0] + r[1] + r[2] for r in ok)
    handover = [(g - r) / NS for g, r in zip(grants[CAP:], releases) if WARMUP <= g < end]
    return {
        "served": served / ((end - WARMUP) / 1e9),
        "ideal_rate": CAP / hold * 1e3,
        "hold": hold,
        "p50": pct(waits, 50),
        "p90": pct(waits, 90),
        "p99": pct(waits, 99),
        "max": max(waits),
        "ideal_wait": (clients - CAP) / CAP * hold,
        "timeouts": len(window) - len(ok),
        "requests": len(window),
        "handover_p50": pct(handover, 50),
        "handover_p99": pct(handover, 99),
        # A 20 ms sleep that took 25 ms or more: the machine, not the
        # limiter, delayed a holder.
        "hold_p50": pct([r[2] / NS for r in ok], 50),
        "hold_p99": pct([r[2] / NS for r in ok], 99),
    }


def open_stats(rows, seconds):
    """An open loop: arrivals on a schedule, some admitted, some timed out."""
    end = seconds * 1e9
    window = [r for r in rows if WARMUP <= r[0] < end]
    ok = [r for r in window if r[3]]
    span = (end - WARMUP) / 1e9
    waits = [r[1] / NS for r in ok]
    # Admissions counted when granted: once arrivals stop, lifo serves the
    # requests it had passed over, which counted by start would look like
    # more than the capacity.
    admitted = sum(1 for r in rows if r[3] and WARMUP <= r[0] + r[1] < end)
    return {
        "offered": len(window) / span,
        "admitted": admitted / span,
        "timed_out": (len(window) - len(ok)) / span,
        "hold": statistics.mean(r[2] for r in ok) / NS,
        "p50": pct(waits, 50),
        "p90": pct(waits, 90),
        "p99": pct(waits, 99),
        "lag_p99": pct([r[4] / NS for r in window], 99),
    }


def median_of(stats):
    return {k: statistics.median(s[k] for s in stats) for k in stats[0]}


def verdict(ok):
    return "**met**" if ok else "**missed**"


def f0(x):
    return f"{x:,.0f}"


def f1(x):
    return f"{x:,.1f}"


out = []
w = out.append


def closed_table(per, label):
    """The medians of closed-loop runs, a row per variant."""
    w(f"| {label} | served/s | ideal/s | hold ms | hold p99 | wait p50 | p90 | p99 | max "
      "| arrival-order ideal | hand-over p50 | p99 | timed out |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for v in ("new", "old"):
        s = median_of(per[v])
        w(f"| {v} | {f1(s['served'])} | {f1(s['ideal_rate'])} | {s['hold']:.2f} | {f1(s['hold_p99'])} "
          f"| {f0(s['p50'])} ms | {f0(s['p90'])} ms | {f0(s['p99'])} ms | {f0(s['max'])} ms "
          f"| {f0(s['ideal_wait'])} ms | {s['handover_p50']:.2f} ms | {f1(s['handover_p99'])} ms "
          f"| {f0(s['timeouts'])} |")


# A run in which a holder's sleep overran its median by 5 ms or more at the
# 99th percentile: the machine delayed our threads, whoever the limiter was.
DISTURBED_MS = 5


def budgets(stats, rows):
    """Each budget on the median of every run, and of the undisturbed ones."""
    calm = [s for s in stats if s["hold_p99"] < s["hold_p50"] + DISTURBED_MS]
    w("")
    w(f"| budget (new) | all {len(stats)} runs: measured | bound | | "
      f"the {len(calm)} undisturbed (hold p99 < p50 + {DISTURBED_MS} ms): measured | bound | |")
    w("|---|---|---|---|---|---|---|")
    for name, judge, unit in rows:
        cells = []
        for group in (stats, calm):
            if group:
                got, bound, ok = judge(median_of(group))
                cells += [f"{f1(got)}{unit}", f"{f1(bound)}{unit}", verdict(ok)]
            else:
                cells += ["–", "–", "–"]
        w(f"| {name} | " + " | ".join(cells) + " |")
    w("")


def closed_runs(per):
    w("Runs (served/s, wait p50 / p99 / max ms, hold p99 ms):")
    w("")
    for v in ("new", "old"):
        w(f"- {v}: " + "; ".join(f"{f1(r['served'])}, {f0(r['p50'])} / {f0(r['p99'])} / {f0(r['max'])}, "
                                 f"{f1(r['hold_p99'])}" for r in per[v]))


m = META
w("# Waiting in order: benchmarks")
w("")
w(f"Run {m['date']} on {m['machine']} ({m['nproc']} cores), shared with other")
w(f"engineers' work: load average {m['load_before']} before, {m['load_after']} after.")
w(f"Each case ran {m['runs']} times, the variants alternately; every figure is the median")
w(f"over the runs of that figure, and the budgets are judged on the medians. Wait")
w(f"percentiles are of the requests that started after a {m['warmup_s']} s warm-up;")
w("\"hold\" is measured (from holding the permit to the return of the release), and")
w("the ideals are computed from it. \"new\" is this branch's library")
w(f"({m['new_rev']}), \"old\" the one before ordered waiting ({m['old_rev']}: one")
w("futex word, every release wakes all waiters).")
w("")
w("    " + m["command"])
w("")

# 1. The C closed loop.
c = m["closed"]
w(f"## 1. C: {c['procs']} processes × {c['threads']} threads, cap 4, hold {c['hold_ms']} ms")
w("")
w(f"Each thread loops `fc_acquire_wait(task, 1, {c['timeout_ms']}, &p)` → nanosleep "
  f"{c['hold_ms']} ms → `fc_release`, for {c['seconds']} s "
  f"(`benches/waiting/waitload.c closed`). In arrival order every thread waits")
w(f"(32 − 4) / 4 × hold ≈ 140 ms; ideal rate = 4 / hold.")
w("")
per = {v: [closed_stats(r, c["seconds"], c["procs"] * c["threads"]) for r in runs("closed", v)]
       for v in ("new", "old")}
closed_table(per, "library")
budgets(per["new"], [
    ("served ≥ 0.97 × ideal rate", lambda s: (s["served"], 0.97 * s["ideal_rate"], s["served"] >= 0.97 * s["ideal_rate"]), "/s"),
    ("wait p99 ≤ 1.3 × arrival-order ideal", lambda s: (s["p99"], 1.3 * s["ideal_wait"], s["p99"] <= 1.3 * s["ideal_wait"]), " ms"),
    ("wait max ≤ 2 × arrival-order ideal", lambda s: (s["max"], 2 * s["ideal_wait"], s["max"] <= 2 * s["ideal_wait"]), " ms"),
])
closed_runs(per)
w("")

# 2. lifo under 3 × overload.
o = m["open"]
w(f"## 2. lifo under 3 × overload: open-loop arrivals at {o['rate']}/s, cap 4 × {o['hold_ms']} ms")
w("")
w(f"Poisson arrivals at {o['rate']}/s (capacity 200/s) dealt to {o['procs']} processes × "
  f"{o['threads']} threads, each request `fc_acquire_wait(task, 1, {o['timeout_ms']}, &p)` then "
  f"holding {o['hold_ms']} ms, for {o['seconds']} s (`waitload.c open`). Waits are of the "
  "admitted requests; \"lag\" is how late a request started against its schedule (small: "
  "the arrivals stayed open-loop).")
w("")
per_o = {v: [open_stats(r, o["seconds"]) for r in runs("open", v)] for v in ("lifo", "fifo")}
w("| order | offered/s | admitted/s | timed out/s | hold ms | wait p50 | p90 | p99 | lag p99 |")
w("|---|---|---|---|---|---|---|---|---|")
for v in ("lifo", "fifo"):
    s = median_of(per_o[v])
    w(f"| {v} | {f0(s['offered'])} | {f1(s['admitted'])} | {f1(s['timed_out'])} | {s['hold']:.2f} "
      f"| {f1(s['p50'])} ms | {f1(s['p90'])} ms | {f1(s['p99'])} ms | {f1(s['lag_p99'])} ms |")
lifo = median_of(per_o["lifo"])
w("")
w("| budget (lifo) | measured | bound | |")
w("|---|---|---|---|")
w(f"| admitted wait p50 ≤ 1.2 × service time | {f1(lifo['p50'])} ms | {f1(1.2 * lifo['hold'])} ms "
  f"| {verdict(lifo['p50'] <= 1.2 * lifo['hold'])} |")
w("")
w("Runs (admitted/s, p50 / p99 ms):")
w("")
for v in ("lifo", "fifo"):
    w(f"- {v}: " + "; ".join(f"{f1(s['admitted'])}, {f1(s['p50'])} / {f1(s['p99'])}" for s in per_o[v]))
w("")

# 3. The uncontended fast path.
w("## 3. The uncontended fast path, old and new library")
w("")
fp = m["fastpath"]
w(f"One thread, `fc_acquire` + `fc_release` {fp['iterations']:,} times on a task that never "
  "limits (`benches/waiting/fastpath.c`, linked statically with each library; the two "
  f"binaries ran alternately, {fp['runs']} times each, old then new).")
w("")
times = {}
with open(os.path.join(RESULTS, "fastpath.txt")) as f:
    for line in f:
        lib, task, ns, limited = line.split()
        assert limited == "0", f"the fast-path task limited: {line}"
        times.setdefault((lib, task), []).append(float(ns))
w("| task | old ns/op | new ns/op | new / old, paired | middle half of the pairs | fastest old | fastest new |")
w("|---|---|---|---|---|---|---|")
names = {"cap": "cap 1000 (never reached)", "rate": "rate 1e8/s, burst 1000 (never reached)"}
for task in ("cap", "rate"):
    old_t, new_t = times[("old", task)], times[("new", task)]
    # Each new run follows an old one: their ratio cancels the load that
    # drifts between runs; the median of the ratios, the load that does not.
    ratios = sorted(n / o for o, n in zip(old_t, new_t))
    q1, q3 = pct(ratios, 25), pct(ratios, 75)
    w(f"| {names[task]} | {statistics.median(old_t):.1f} | {statistics.median(new_t):.1f} "
      f"| {statistics.median(ratios):.3f} | {q1:.2f}–{q3:.2f} | {min(old_t):.1f} | {min(new_t):.1f} |")
w("")
w("Runs (ns/op, in order):")
w("")
for task in ("cap", "rate"):
    for lib in ("old", "new"):
        w(f"- {task}, {lib}: " + ", ".join(f"{t:.0f}" for t in times[(lib, task)]))
w("")

# 4. Python under uvicorn.
p = m["python"]
w(f"## 4. Python: uvicorn, {p['workers']} workers, {p['connections']} connections, cap 4, hold {p['hold_ms']} ms")
w("")
w("The handler (`benches/waiting/pyapp.py`, Starlette) does `async with "
  f"task.acquire_async(timeout=2): await asyncio.sleep({p['hold_ms'] / 1000})`; the client "
  f"(`pyclient.py`, raw HTTP/1.1 on asyncio) keeps {p['connections']} keep-alive connections busy "
  f"for {p['seconds']} s. Wait and hold are measured in the handler. Arrival-order ideal = "
  "(32 − 4) / 4 × hold. \"old\" is the module before ordered waiting, whose "
  "`acquire_async` polls (0.5 ms doubling to 20 ms), in the same run.")
w("")
per_p = {v: [closed_stats(r, p["seconds"], p["connections"]) for r in runs("python", v)]
         for v in ("new", "old")}
closed_table(per_p, "module")
w("| old, as first reported | 184 | 200 | – | 68 ms | – | 516 ms | – | ~160 ms | – |")
budgets(per_p["new"], [
    ("served ≥ 0.95 × ideal rate", lambda s: (s["served"], 0.95 * s["ideal_rate"], s["served"] >= 0.95 * s["ideal_rate"]), "/s"),
    ("served ≥ 0.95 × 200/s (the nominal rate)", lambda s: (s["served"], 190.0, s["served"] >= 190), "/s"),
    ("wait p99 ≤ 1.3 × arrival-order ideal", lambda s: (s["p99"], 1.3 * s["ideal_wait"], s["p99"] <= 1.3 * s["ideal_wait"]), " ms"),
])
closed_runs(per_p)
w("")
# 5. The pass-on reproducer.
n = m["passon"]["rounds"]
w("## 5. Two permits freed together, two handles waiting (a reproducer)")
w("")
w(f"`benches/waiting/passon.c`, {n} rounds: this process holds both permits of a task capped at 2; "
  "process A starts waiting, 10 ms later process B (one waiter each, so B's ticket is the next); "
  "both permits are released back to back at an offset that varies by round; A then holds its "
  "permit 100 ms, so A's release cannot be what serves B. Time from the releases to each being served:")
w("")
w("| library | A (the head) median | max | B (the next) median | max |")
w("|---|---|---|---|---|")
for lib in ("new", "old"):
    with open(os.path.join(RESULTS, f"passon-{lib}.txt")) as f:
        pairs = [tuple(int(x) / NS for x in line.split()) for line in f if line.strip()]
    a, b = [x for x, _ in pairs], [y for _, y in pairs]
    w(f"| {lib} | {statistics.median(a):.2f} ms | {max(a):.2f} ms | {statistics.median(b):.2f} ms "
      f"| {max(b):.2f} ms |")
w("")

# What was found reading the numbers, kept beside the programs: the
# generated part above changes with every run, this only when rewritten.
notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.md")
if os.path.exists(notes):
    w(open(notes).read().rstrip())
    w("")
print("\n".join(out))
