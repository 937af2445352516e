#!/usr/bin/env bash
# Runs the benchmarks (the C program benches/c_abi.c and criterion against
# governor; Python against `limits`) and writes the figures to
# benches/RESULTS.md, with the load average before and after.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check limits
install_python_module
mkdir -p target/bench
cut -d' ' -f1-3 /proc/loadavg > target/bench/loadavg-start
# The C benchmark: the release libflowctrl.so and governor's `check()`
# behind a C ABI of its own (benches/governor-shim, its own workspace and
# target dir), both called through the PLT from one C program.
cargo build --release --lib
cargo build --release --manifest-path benches/governor-shim/Cargo.toml --target-dir target/governor-shim
soname=$(readelf -d target/release/libflowctrl.so | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
mkdir -p target/bench/lib
ln -sfn "$ROOT/target/release/libflowctrl.so" "target/bench/lib/${soname:?no SONAME in libflowctrl.so}"
"${CC:-cc}" -O2 -Wall -Wextra -Werror -Iinclude benches/c_abi.c -o target/bench/c_abi \
    -Ltarget/release -Ltarget/governor-shim/release -lflowctrl -lgovernor_shim -lpthread \
    -Wl,-rpath,"$ROOT/target/bench/lib" -Wl,-rpath,"$ROOT/target/governor-shim/release"
env -u LD_LIBRARY_PATH target/bench/c_abi 15 1000000 > target/bench/c_abi.json
# Instructions per call of the one-thread cases (benches/c_ir.c under
# callgrind: exact, whatever the load), when valgrind is there.
echo '{}' > target/bench/ir.json
if command -v valgrind >/dev/null; then
    "${CC:-cc}" -O2 -Wall -Wextra -Werror -Iinclude benches/c_ir.c -o target/bench/c_ir -ldl
    sep=""
    {
        printf '{'
        for which in 0 1 2 3; do
            n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
                --toggle-collect='fc_acquire*' --toggle-collect='fc_release*' \
                target/bench/c_ir target/release/libflowctrl.so "$which" 2>&1 |
                sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
            printf '%s"%s": %d' "$sep" "$which" $((n / 50000))
            sep=", "
        done
        printf '}\n'
    } > target/bench/ir.json
fi
cargo bench --bench acquire
"$VENV/bin/python" benches/python_pair.py > target/bench/python.json
cut -d' ' -f1-3 /proc/loadavg > target/bench/loadavg-end
"$VENV/bin/python" benches/report.py target/bench/python.json target/bench/c_abi.json > benches/RESULTS.md
cat benches/RESULTS.md
