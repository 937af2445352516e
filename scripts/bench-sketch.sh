#!/usr/bin/env bash
# What the round-trip sketch costs threads of one process releasing at
# once (benches/sketch.rs): this release's lane sketches against a table
# as 0.3.0 made it (one word per bucket per process), one thread and two
# pinned to two cores, in one run with the cases alternating. Writes
# benches/SKETCH.md. About a minute once built.
#
#   scripts/bench-sketch.sh            # FLOWCTRL_BENCH_ROUNDS=15
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
cargo bench -q --bench sketch --no-run
# Before the report is written (which changes a tracked file).
commit="$(git describe --always --dirty)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
table="$(cargo bench -q --bench sketch)"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
{
    cat <<HEAD
# The round-trip sketch under threads: benchmark

Run $(date -u '+%Y-%m-%d %H:%M UTC') on ${cpu} ($(nproc) cores), a shared VM:
load average ${load_before} before, ${load_after} after. Commit
${commit}. Produced by \`scripts/bench-sketch.sh\`
(benches/sketch.rs).

One task without limits, so the threads share no word of it but what the
sketch would share. Each case acquires and releases ${FLOWCTRL_BENCH_PAIRS:-2000000}
permits per thread with a fixed round-trip time, ${FLOWCTRL_BENCH_ROUNDS:-15} rounds, the cases
alternating within each round; the figures are the medians (and extremes)
over the rounds, in nanoseconds per acquire + release on each thread. Two
threads run pinned to two cores. "own lane sketches" is a table this
release makes: each lane counts its threads' round trips in a sketch of its
own. "0.3.0 table" is the same table as 0.3.0 made it (no lane sketches):
the process's threads count in one word per bucket, on a lane's ledger
line. 2 ms falls in bucket 2 (on lane 0's line in a 0.3.0 table), 40 ms
in bucket 11 (on lane 2's line there).

HEAD
    echo "$table"
    cat <<'TAIL'

Reading it: with the lanes' own sketches two threads pay what one thread
pays (the budget: no new cost on the request path); where the threads
share a bucket's word they pay a cache-line transfer per release, tens of
nanoseconds. A single thread pays the same on both tables.
TAIL
} > benches/SKETCH.md
cat benches/SKETCH.md
