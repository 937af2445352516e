"""Writes benches/RESULTS.md from the C benchmark's JSON (argv[2],
benches/c_abi.c), the criterion estimates and the Python benchmark's JSON
(argv[1]), with the machine, the date, the load average and each budget."""

import datetime
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def median(group, name):
    path = os.path.join(ROOT, "target", "criterion", group, name, "new", "estimates.json")
    with open(path) as f:
        return json.load(f)["median"]["point_estimate"]


def machine():
    model = "unknown CPU"
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    clock = open("/sys/devices/system/clocksource/clocksource0/current_clocksource").read().strip()
    return f"{model}, {os.cpu_count()} cores, Linux {platform.release()}, clocksource {clock}"


def verdict(ok):
    return "met" if ok else "**missed**"


def main():
    with open(sys.argv[1]) as f:
        py = json.load(f)
    with open(sys.argv[2]) as f:
        c = json.load(f)
    c_ns = {k: v["median"] for k, v in c["ns_per_call"].items()}
    c_tput = {k: v["median"] / 1e6 for k, v in c["calls_per_second"].items()}
    fc_1 = median("one_thread", "flowctrl_acquire")
    fc_pair_1 = median("one_thread", "flowctrl_acquire_release")
    fc_capped_1 = median("one_thread", "flowctrl_capped_acquire_release")
    fc_capped_2p = median("two_processes", "flowctrl_capped_acquire_release")
    gov_1 = median("one_thread", "governor_check")
    fc_2t = median("two_threads", "flowctrl_acquire_release")
    gov_2t = median("two_threads", "governor_check")
    fc_2p = median("two_processes", "flowctrl_acquire_release")
    clock = median("floor", "clock_read")
    cas = median("floor", "compare_and_swap")
    py_fc = py["flowctrl_try_acquire_release_ns"]
    py_limits = py["limits_fixed_window_hit_ns"]
    # In the 2-way cases each of the two workers makes one call per iteration:
    # throughput = 2 calls per iteration time.
    tput = lambda ns: 2e3 / ns  # millions of calls per second
    rows = [
        ("floor", "one clock read (TSC)", clock, 1e3 / clock),
        ("floor", "one uncontended compare-and-swap", cas, 1e3 / cas),
        ("one thread", "flowctrl acquire (the decision)", fc_1, 1e3 / fc_1),
        ("one thread", "flowctrl acquire + release", fc_pair_1, 1e3 / fc_pair_1),
        ("one thread", "flowctrl acquire + release, task with a cap", fc_capped_1, 1e3 / fc_capped_1),
        ("one thread", "governor direct `check()`", gov_1, 1e3 / gov_1),
        ("two threads, one task", "flowctrl acquire + release", fc_2t, tput(fc_2t)),
        ("two threads, one limiter", "governor `check()`", gov_2t, tput(gov_2t)),
        ("two processes, one task", "flowctrl acquire + release", fc_2p, tput(fc_2p)),
        ("two processes, one task", "flowctrl acquire + release, task with a cap", fc_capped_2p, tput(fc_capped_2p)),
        ("Python", "flowctrl `try_acquire()` + `release()`", py_fc, 1e3 / py_fc),
        ("Python", "limits FixedWindowRateLimiter(MemoryStorage).hit", py_limits, 1e3 / py_limits),
    ]
    gov = c_ns["governor_check"]
    gov_2t = c_tput["two_threads_governor_check"]
    c_rows = [
        ("floor", "one clock read (`rdtsc`)", "floor_clock_read"),
        ("floor", "one uncontended compare-and-swap", "floor_compare_and_swap"),
        ("one thread", "`fc_acquire` (the decision)", "fc_acquire"),
        ("one thread", "`fc_acquire` + `fc_release`", "fc_acquire_release"),
        ("one thread", "`fc_acquire` + `fc_release`, task with a cap", "fc_capped_acquire_release"),
        ("one thread", "governor `check()` (quanta clock)", "governor_check"),
    ]
    c_two = [
        ("two processes, one task", "`fc_acquire`", "two_processes_fc_acquire"),
        ("two processes, one task", "`fc_acquire` + `fc_release`", "two_processes_fc_acquire_release"),
        ("two processes, one task", "`fc_acquire` + `fc_release`, with a cap", "two_processes_fc_capped_acquire_release"),
        ("two threads, one limiter", "governor `check()`", "two_threads_governor_check"),
    ]
    with open(os.path.join(ROOT, "target", "bench", "loadavg-start")) as f:
        load_start = f.read().strip()
    with open(os.path.join(ROOT, "target", "bench", "loadavg-end")) as f:
        load_end = f.read().strip()
    out = [
        "# Benchmark results",
        "",
        f"Measured {datetime.date.today().isoformat()} on {machine()}.",
        f"Load average (1, 5, 15 min) {load_start} at the start of the run, {load_end} at its end.",
        "Produced by `./scripts/bench.sh`. The machine is a shared 2-core VM: read",
        "ratios (each taken within one run), not absolutes. Limits are set far above",
        "the loops' pace (rate 1e9/s, burst 1e6, cap 1e6), so every call is admitted",
        "and does its full work.",
        "",
        "## Through the C ABI (benches/c_abi.c)",
        "",
        f"One C program (`-O2`) calls `libflowctrl.so` and governor's `check()` (a cdylib of",
        f"benches/governor-shim), both through the PLT, in alternating batches: each of",
        f"{c['rounds']} rounds runs {c['calls_per_batch']:,} calls of every case in turn; the",
        "figures are the medians over the rounds. Two-worker cases: two forked processes",
        "on one task (or two threads on one governor limiter) start on one instant; the",
        "aggregate is 2 × calls over the slower worker's loop time.",
        "",
        "| case | what | median ns per call | × governor `check()` |",
        "|---|---|---:|---:|",
    ]
    with open(os.path.join(ROOT, "target", "bench", "ir.json")) as f:
        ir = json.load(f)
    # Instructions per call (benches/c_ir.c under callgrind), by case.
    ir_of = {"fc_acquire": "0", "fc_acquire_release": "1", "fc_capped_acquire_release": "2"}
    instr = lambda k: f"{ir[ir_of[k]]}" if ir_of.get(k) in ir else "–"
    out[-2:] = [
        "| case | what | median ns per call | × governor `check()` | instructions per call |",
        "|---|---|---:|---:|---:|",
    ]
    out += [
        f"| {a} | {w} | {c_ns[k]:.1f} | {c_ns[k] / gov:.2f} | {instr(k)} |" for a, w, k in c_rows
    ]
    out += [
        "",
        "Instructions per call: inside `fc_acquire`/`fc_release`, counted by callgrind",
        "(benches/c_ir.c; exact, and blind to the load).",
    ]
    if "3" in ir and "2" in ir:
        out += [
            "",
            f"On a table whose lanes come from a pool (`lanes = 64`), the capped pair is "
            f"{ir['3']} instructions ({ir['2']} with a set per pair): the pair map's look-up.",
        ]
    out += [
        "",
        "| case | what | M calls/s (both workers) | × governor, 2 threads |",
        "|---|---|---:|---:|",
    ]
    out += [f"| {a} | {w} | {c_tput[k]:.1f} | {c_tput[k] / gov_2t:.2f} |" for a, w, k in c_two]
    refused = c.get("governor_two_threads_refused", 0)
    out += [
        "",
        f"governor refused {refused:,} of its two threads' calls over the run (a refusal is",
        "cheaper than an admission; flowctrl's calls were all admitted).",
        "",
        "## In Rust (criterion, benches/acquire.rs)",
        "",
        "Criterion medians; the same cases from Rust, and the Python pair (median of 9",
        "runs of 200,000 calls).",
        "",
        "| case | what | median ns per iteration | M calls/s (all workers) |",
        "|---|---|---:|---:|",
    ]
    out += [f"| {a} | {w} | {ns:.1f} | {m:.1f} |" for a, w, ns, m in rows]
    r_dec = c_ns["fc_acquire"] / gov
    r_pair = c_ns["fc_acquire_release"] / gov
    r_2p = c_tput["two_processes_fc_acquire"] / gov_2t
    r_2p_cap = c_tput["two_processes_fc_capped_acquire_release"] / gov_2t
    r3 = py_limits / py_fc
    out += [
        "",
        "## Budgets",
        "",
        "| budget | measured | verdict |",
        "|---|---|---|",
        f"| C ABI decision ≤ 1.0 × governor `check()` | {r_dec:.2f} × ({c_ns['fc_acquire']:.1f} vs {gov:.1f} ns) | {verdict(r_dec <= 1.0)} |",
        f"| C ABI acquire + release ≤ 2.0 × governor `check()` | {r_pair:.2f} × ({c_ns['fc_acquire_release']:.1f} vs {gov:.1f} ns) | {verdict(r_pair <= 2.0)} |",
        f"| with a cap, acquire + release ≤ 0.1's 109–121 ns (criterion) | {fc_capped_1:.1f} ns (C ABI: {c_ns['fc_capped_acquire_release']:.1f} ns) | {verdict(fc_capped_1 <= 121)} |",
        f"| 2 processes, rate only ≥ 2 × governor's 2 threads | {r_2p:.2f} × ({c_tput['two_processes_fc_acquire']:.1f} vs {gov_2t:.1f} M/s) | {verdict(r_2p >= 2)} |",
        f"| 2 processes, with a cap ≥ 1 × governor's 2 threads | {r_2p_cap:.2f} × ({c_tput['two_processes_fc_capped_acquire_release']:.1f} vs {gov_2t:.1f} M/s) | {verdict(r_2p_cap >= 1)} |",
        "| global mode ≥ 0.9 × local-only | not measured here: needs a store (scripts/bench-quota.sh) | – |",
        f"| Python pair ≥ 10 × faster than `limits` | {r3:.1f} × ({py_fc:.0f} vs {py_limits:.0f} ns) | {verdict(r3 >= 10)} |",
        "",
        "## Reading the misses",
        "",
        f"One `rdtsc` costs {c_ns['floor_clock_read']:.1f} ns on this machine and an uncontended",
        f"compare-and-swap {c_ns['floor_compare_and_swap']:.1f} ns; governor's `check()` is those two",
        f"({gov:.1f} ns: the CAS overlaps the clock read). A decision that reads the clock",
        "can therefore not go below about 1.0 × governor, and an acquire + release that",
        "reads it twice (the release measures the round-trip time its statistics and",
        "the latency sketch report) not below about 2.0 ×: the budgets sit on the floor.",
        f"What flowctrl adds above it ({c_ns['fc_acquire'] - gov:.1f} ns per decision) is its",
        "bookkeeping in instructions, not in waiting: the attachment check, the",
        "versioned configuration read, the per-process admission counter, the permit's",
        "keyed check, the C face's checks and its 64-byte permit. The moonshot (0.5 ×)",
        "needs decisions that read no clock and touch no shared line: permits taken",
        "in batches into per-thread pools, sized by the rate, the burst and the time.",
        "",
        "With two workers the shared rate word's cache line moves between the cores",
        "on every admission: each process pays a transfer per decision, where",
        "governor's two threads on one limiter pay the same transfer but have less",
        "work around it. Batches per process would remove the transfer. On this",
        "shared VM the two-worker figures are bimodal from run to run (for 0.3 and",
        "this build alike): while another tenant holds a core, both workers share",
        "the other and the aggregate halves (the capped pair drops to ~4 M/s); the",
        "rounds are in target/bench/c_abi.json.",
        "",
        f"The cap's budget is met in nanoseconds ({fc_capped_1:.1f} ≤ 121 ns), but 0.1's",
        "109–121 ns were measured on an Intel VM where governor's `check()` took",
        f"~29 ns (3.7–4.1 × governor); here the capped pair is {fc_capped_1 / gov_1:.1f} × criterion's",
        "governor. Against that yardstick the capped pair is still slower than 0.1's.",
        "",
        "A task with a cap pays the crash-exact ledger (docs/reference/internals.md): each",
        "acquire and release is a small transaction of four compare-and-swaps (mark",
        "the lane busy, move the shared word with its tag, apply, untag) where a bare",
        "counter needs one. Lanes owned by one thread would make two of the four",
        f"(begin, apply) plain stores: at {c_ns['floor_compare_and_swap']:.1f} ns per compare-and-swap here, about",
        f"{2 * c_ns['floor_compare_and_swap']:.0f} ns per op; the rest of the capped pair is instructions",
        "(benches/BEFORE-AFTER.md has what was cut and what plain-store counters",
        "measured).",
        "",
    ]
    print("\n".join(out))


if __name__ == "__main__":
    main()
