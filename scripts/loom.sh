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
# never reused), on loom's atomics. About 80 s on 2 cores once built.
# Arguments go to the test binary, e.g. `--ignored` runs the model that
# shows the drain-order weakness, `--nocapture` prints how many executions
# each keyed model checked; LOOM_MAX_PREEMPTIONS=n overrides every model's
# bound (deeper bounds take far longer).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# The models need the library alone (no command, header or metrics), built
# as the simulator's release build is, so its dependencies are shared.
# One model at a time: loom's executions are mostly the kernel's work
# (mapping and unmapping stacks), and two at once took 111 s where one
# after the other took 78.
cargo test --release --no-default-features --features loom --lib loom_model -- --test-threads=1 "$@"
