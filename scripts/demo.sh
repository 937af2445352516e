#!/usr/bin/env bash
# Two C workers and two Python workers share one task limited to 1000
# requests/s for the host; each offers ~800/s. A monitor prints every second
# what each process got and the host total, which holds the limit. The limit
# comes from a config file (it wins over the workers' own numbers); halfway
# through, the file is edited to 600/s and every worker follows within a
# second, with no restart. At the end, `flowctrl top --once` shows the table.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"

cargo build -q --release --lib --bin flowctrl
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
CONFIG="$ROOT/target/demo/flowctrl.toml"
limit() { # As an editor saves: a new file renamed over the old one.
    printf '[table]\npath = "%s"\n\n[tasks.%s]\nlocal_rate = %s\nburst = %s\n' \
        "$TABLE" "$TASK" "$1" "$BURST" >"$CONFIG.new"
    mv "$CONFIG.new" "$CONFIG"
}
limit "$RATE"
export FLOWCTRL_CONFIG="$CONFIG"
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -f "$TABLE"; }
trap cleanup EXIT

run() { "$@" "$TABLE" "$TASK" $((SECONDS_TO_RUN + 2)) "$RATE" "$BURST" "$OFFER" & pids+=($!); }
run target/demo/worker_c
run target/demo/worker_c
run "$VENV/bin/python" demo/worker.py
run "$VENV/bin/python" demo/worker.py
sleep 1 # let every worker attach
(sleep $((SECONDS_TO_RUN / 2)); limit 600; echo "(edited $CONFIG: local_rate = 600)") &
"$VENV/bin/python" demo/monitor.py "$TABLE" "$TASK" --seconds "$SECONDS_TO_RUN" \
    --label "${pids[0]}=C" --label "${pids[1]}=C" \
    --label "${pids[2]}=python" --label "${pids[3]}=python"
target/release/flowctrl -t "$TABLE" top --once --interval 0.5 || true
wait "${pids[@]}"
pids=()
