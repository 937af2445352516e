#!/usr/bin/env bash
# Two C workers and two Python workers share one task limited to 1000
# requests/s for the host; each offers ~800/s. A monitor prints every second
# what each process got and the host total, which holds the limit.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"

cargo build -q --release --lib
mkdir -p target/demo
# worker_c records the library's SONAME (build.rs sets it); target/release
# has only libflowctrl.so, so it finds it through a link of that name.
soname=$(readelf -d target/release/libflowctrl.so | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
ln -sfn "$ROOT/target/release/libflowctrl.so" "target/demo/${soname:?no SONAME in libflowctrl.so}"
cc -std=c99 -O2 -Wall -Wextra -Werror -Iinclude demo/worker.c \
    -Ltarget/release -lflowctrl -Wl,-rpath,"$ROOT/target/demo" -o target/demo/worker_c
install_python_module

TABLE="/dev/shm/flowctrl-demo-$$"
TASK=checkout
SECONDS_TO_RUN=${DEMO_SECONDS:-10}
RATE=1000 BURST=20 OFFER=800
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -f "$TABLE"; }
trap cleanup EXIT

run() { "$@" "$TABLE" "$TASK" $((SECONDS_TO_RUN + 2)) "$RATE" "$BURST" "$OFFER" & pids+=($!); }
run target/demo/worker_c
run target/demo/worker_c
run "$VENV/bin/python" demo/worker.py
run "$VENV/bin/python" demo/worker.py
sleep 1 # let every worker attach
"$VENV/bin/python" demo/monitor.py "$TABLE" "$TASK" --seconds "$SECONDS_TO_RUN" \
    --label "${pids[0]}=C" --label "${pids[1]}=C" \
    --label "${pids[2]}=python" --label "${pids[3]}=python"
wait "${pids[@]}"
pids=()
