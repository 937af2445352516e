#!/usr/bin/env bash
# Fuzzes the table file (tests/fuzz_table.rs) for FLOWCTRL_FUZZ_MINUTES
# minutes per layout (default 10; a table with a set per pair, then a
# pooled one), then the config file's parser (tests/fuzz_config.rs) and the
# store's reply decoders (tests/fuzz_store.rs) for as long each,
# FLOWCTRL_FUZZ_JOBS cases at once (default 4; the table fuzzer's), in a
# release build that keeps debug assertions and overflow checks (an overflow
# on hostile bytes is a finding, not a silent wrap). cargo-fuzz needs nightly;
# this is a seeded random search instead: FLOWCTRL_FUZZ_SEED replays a run,
# FLOWCTRL_FUZZ_REPLAY=<case seed> one case. Findings are saved under
# target/tmp/fuzz-findings/ and listed at the end; the log is in
# target/fuzz-logs/.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export FLOWCTRL_FUZZ_MINUTES="${FLOWCTRL_FUZZ_MINUTES:-10}"
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
export CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true
LOGS="$ROOT/target/fuzz-logs"
mkdir -p "$LOGS"
log="$LOGS/fuzz-$(date +%Y%m%d-%H%M%S).log"

cargo test --release --test fuzz_table --test fuzz_config --test fuzz_store --no-run || exit 1
echo "== fuzzing the table for $FLOWCTRL_FUZZ_MINUTES minutes a layout (log: $log)"
cargo test --release --test fuzz_table -- --nocapture >"$log" 2>&1
status=$?
# The summary: figures, outcome counts, and the kinds of findings.
sed -n '/^fuzz figures/,/^test result/p' "$log" | grep -v "^  *[0-9]*: \|^  *at \|^stack backtrace\|^note: Some"
# The text fuzzers: a fresh seed each run unless one is given (the suite's
# run keeps seed 1); a failure prints the input and the seed to replay.
export FLOWCTRL_FUZZ_SEED="${FLOWCTRL_FUZZ_SEED:-$(date +%s%N)}"
for t in fuzz_config fuzz_store; do
    echo "== fuzzing $t for $FLOWCTRL_FUZZ_MINUTES minutes (log: $log)"
    cargo test --release --test "$t" -- --nocapture >>"$log" 2>&1 || status=1
    grep -A3 "panicked" "$log" | head -20
done
grep -E "^fuzz( \([a-z]+\))?: FLOWCTRL_FUZZ_SEED" "$log"
exit "$status"
