#!/usr/bin/env bash
# Before/after of the request path through the C ABI: builds the release
# libflowctrl.so of <commit> (exported with `git archive` into
# target/compare/<commit>, built there, in its own target dir) and of this
# tree, then runs benches/c_ab.c, which loads both into one process and
# times them batch for batch, <runs> times (default 3). With valgrind
# installed it also counts the instructions per call of each build
# (callgrind: exact, and blind to the neighbours' load).
#
#   scripts/bench-compare.sh <commit> [runs]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
commit=$(git rev-parse --short "${1:?usage: scripts/bench-compare.sh <commit> [runs]}")
runs=${2:-3}
before="$ROOT/target/compare/$commit"
if [ ! -f "$before/target/release/libflowctrl.so" ]; then
    rm -rf "$before" && mkdir -p "$before"
    git archive "$commit" | tar -x -C "$before"
    (cd "$before" && cargo build --release --lib)
fi
cargo build --release --lib
mkdir -p target/bench
"${CC:-cc}" -O2 -Wall -Wextra -Werror -Iinclude benches/c_ab.c -o target/bench/c_ab -ldl
a="$before/target/release/libflowctrl.so"
b="$ROOT/target/release/libflowctrl.so"
echo "A = $commit, B = this tree; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$runs"); do env -u LD_LIBRARY_PATH target/bench/c_ab "$a" "$b"; done
if command -v valgrind >/dev/null; then
    # Instructions inside fc_acquire/fc_release per call, by case.
    cat > target/bench/ir.c <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "flowctrl.h"
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) return 1;
    fc_status (*oi)(fc_table_options *, size_t) = dlsym(h, "fc_table_options_init");
    fc_status (*op)(const char *, const fc_table_options *, fc_table **) = dlsym(h, "fc_table_open");
    fc_status (*ci)(fc_task_config *, size_t) = dlsym(h, "fc_task_config_init");
    fc_status (*rg)(const fc_table *, const char *, const fc_task_config *, fc_task **) = dlsym(h, "fc_task_register");
    fc_status (*acq)(const fc_task *, uint32_t, fc_permit *) = dlsym(h, "fc_acquire");
    fc_status (*rel)(const fc_task *, fc_permit *, fc_outcome) = dlsym(h, "fc_release");
    int which = atoi(argv[2]);
    char path[64];
    snprintf(path, sizeof path, "/tmp/flowctrl-ir-%d", (int)getpid());
    unlink(path);
    fc_table_options o; oi(&o, sizeof o);
    fc_table *t; if (op(path, &o, &t)) return 1;
    unlink(path);
    fc_task_config c; ci(&c, sizeof c);
    c.local_rate = 1e9; c.burst = 1000000; c.max_concurrency = which == 2 ? 1000000 : 0;
    fc_task *k; if (rg(t, "x", &c, &k)) return 1;
    fc_permit p;
    for (long i = 0; i < 50000; i++) {
        if (acq(k, 1, &p)) abort();
        if (which >= 1 && rel(k, &p, FC_OUTCOME_SUCCESS)) abort();
    }
    return 0;
}
EOF
    "${CC:-cc}" -O2 -Iinclude target/bench/ir.c -o target/bench/ir -ldl
    printf '%-10s %12s %28s %26s\n' "build" "fc_acquire" "fc_acquire + fc_release" "capped acquire + release"
    for lib in "$a" "$b"; do
        line=$([ "$lib" = "$a" ] && echo "A" || echo "B")
        for which in 0 1 2; do
            n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
                --toggle-collect='fc_acquire*' --toggle-collect='fc_release*' \
                target/bench/ir "$lib" "$which" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
            line="$line $((n / 50000))"
        done
        echo "$line" | awk '{printf "%-10s %12s %28s %26s   (instructions per call)\n", $1, $2, $3, $4}'
    done
fi
