#!/usr/bin/env bash
# Runs the loom models (`mod loom_model`): the ledger protocol
# (src/limit/ledger.rs: every interleaving of the real update/settle/drain
# within each model's preemption bound), the wait queue's flag and wake
# protocol (src/task/wait/queue.rs), and key placement and entry reuse of
# keyed tasks (src/keyed/map_loom.rs: the real place/find/decision loop,
# rate spend and permit ledger on a 16-key file: (a) two threads placing
# one new key leave it in one entry and both decide on it; (b) a spend
# racing the reuse of its key's entry stays with its key, a moved-in key
# carries none of it; (c) a limited key and a key taking a permit are
# never reused), on loom's atomics. About a minute on 2 cores once built.
# Arguments go to the test binary, e.g. `--ignored` runs the model that
# shows the drain-order weakness, `--nocapture` prints how many executions
# each keyed model checked; LOOM_MAX_PREEMPTIONS=n overrides every model's
# bound (deeper bounds take far longer).
#
# The loom build lives in its own target dir: RUSTFLAGS="--cfg loom" would
# otherwise throw away the normal build's artifacts and the other way round.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export RUSTFLAGS="${RUSTFLAGS:-} --cfg loom"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/loom"
cargo test --release --lib loom_model -- "$@"
