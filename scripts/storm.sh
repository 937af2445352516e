#!/usr/bin/env bash
# The full crash storm: tests/storm.rs in a release build with 1,000 worker
# kills (FLOWCTRL_STORM_KILLS), three runs (FLOWCTRL_STORM_RUNS), one test at a
# time so the reclaim latencies are not measured against another storm.
# Prints each run's figures: kills, drift checks, max drift, cap exceeded,
# reclaim latency p50/p99/max, time taken; and the reaper-kill test's.
# Full logs go to target/storm-logs/. A failing run makes the script fail,
# after all runs.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
KILLS="${FLOWCTRL_STORM_KILLS:-1000}"
RUNS="${FLOWCTRL_STORM_RUNS:-3}"
LOGS="$ROOT/target/storm-logs"
mkdir -p "$LOGS"

cargo test --release --test storm --no-run || exit 1
failed=0
for run in $(seq 1 "$RUNS"); do
    log="$LOGS/storm-$(date +%Y%m%d-%H%M%S)-run$run.log"
    echo "== storm run $run/$RUNS: $KILLS kills (log: $log)"
    start=$(date +%s)
    FLOWCTRL_STORM_KILLS="$KILLS" cargo test --release --test storm -- --nocapture --test-threads=1 \
        >"$log" 2>&1
    status=$?
    grep -E "^kill storm|^  |^reapers killed|^test result|FAILED|failures:" "$log" | grep -v "^  *[0-9]*: \|^  *at "
    echo "   exit $status, $(( $(date +%s) - start )) s"
    [ "$status" = 0 ] || failed=1
done
exit "$failed"
