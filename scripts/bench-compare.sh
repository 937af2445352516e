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
    "${CC:-cc}" -O2 -Wall -Werror -Iinclude benches/c_ir.c -o target/bench/c_ir -ldl
    printf '%-10s %12s %28s %26s\n' "build" "fc_acquire" "fc_acquire + fc_release" "capped acquire + release"
    for lib in "$a" "$b"; do
        line=$([ "$lib" = "$a" ] && echo "A" || echo "B")
        for which in 0 1 2; do
            n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
                --toggle-collect='fc_acquire*' --toggle-collect='fc_release*' \
                target/bench/c_ir "$lib" "$which" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
            line="$line $((n / 50000))"
        done
        echo "$line" | awk '{printf "%-10s %12s %28s %26s   (instructions per call)\n", $1, $2, $3, $4}'
    done
fi
