#!/usr/bin/env bash
# Fuzzes the table file (tests/fuzz_table.rs) for FLOWCTRL_FUZZ_MINUTES
# minutes per layout (default 10; a table with a set per pair, then a
# pooled one), FLOWCTRL_FUZZ_JOBS cases at once (default 4), in a
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

cargo test --release --test fuzz_table --no-run || exit 1
echo "== fuzzing for $FLOWCTRL_FUZZ_MINUTES minutes (log: $log)"
cargo test --release --test fuzz_table -- --nocapture >"$log" 2>&1
status=$?
# The summary: figures, outcome counts, and the kinds of findings.
sed -n '/^fuzz figures/,/^test result/p' "$log" | grep -v "^  *[0-9]*: \|^  *at \|^stack backtrace\|^note: Some"
grep -E "^fuzz( \([a-z]+\))?: FLOWCTRL_FUZZ_SEED" "$log"
exit "$status"
