#!/usr/bin/env bash
# The benchmarks of ordered waiting (waiters served in order), each against its
# budget, written to benches/WAITING.md:
#   1. C, 4 processes × 8 threads in fc_acquire_wait on a cap of 4 × 20 ms,
#      this library and the one before ordered waiting ($BASE_REV), alternately;
#   2. lifo and fifo under 3 × overload (open-loop arrivals at 600/s);
#   3. the uncontended fc_acquire + fc_release, old and new library;
#   5. a reproducer: two permits freed together while two handles wait;
#   4. Python: uvicorn with 2 workers, acquire_async, 32 connections, with
#      this module and the old one (polling) alternately.
# About 4 minutes once built (the first run also builds both libraries and
# the Python module). Timing is noisy on a shared machine: each case runs
# $RUNS times and the report takes medians.
#
#   scripts/bench-waiting.sh            # RUNS=3 BASE_REV=595eac6
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
RUNS="${RUNS:-3}"
FAST_RUNS="${FAST_RUNS:-31}"
BASE_REV="${BASE_REV:-595eac6}"
WARMUP_S=1
out=target/bench-waiting
results="$out/results"
rm -rf "$results"
mkdir -p "$results" "$out/new" "$out/old"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

# Each run gets a fresh table in /dev/shm, removed when it is done.
tables=()
cleanup() { rm -f "${tables[@]/#//dev/shm/}"; }
trap cleanup EXIT
fresh_table() { table="waitbench-$$-${#tables[@]}"; tables+=("$table"); }

# The libraries. The old one is built from a copy of $BASE_REV's tree under
# target/ (its own workspace and target dir), kept between runs.
cargo build --release --lib
base=target/waitbase
base_rev="$(git rev-parse "$BASE_REV")"
if [ "$(cat "$base/.rev" 2>/dev/null)" != "$base_rev" ]; then
    rm -rf "$base"
    mkdir -p "$base"
    git archive "$base_rev" | tar -x -C "$base"
    echo "$base_rev" > "$base/.rev"
fi
(cd "$base" && cargo build --release --lib)

# The programs are compiled against the committed header: a stale one would
# not say what the library reads (cargo writes the fresh one to OUT_DIR).
fresh_header="$(ls -t target/release/build/flowctrl-*/out/flowctrl.h | head -n 1)"
cmp -s "$fresh_header" include/flowctrl.h || {
    echo "include/flowctrl.h is stale: FLOWCTRL_BLESS_HEADER=1 cargo test --test header" >&2
    exit 1
}
# Statically linked: the same program text against each library, no PLT or
# loader differences between the two.
compile() { # <lib dir> <include dir> <into>
    local prog
    for prog in waitload fastpath passon; do
        ${CC:-cc} -std=c99 -O2 -Wall -Wextra -Werror -pthread -I"$2" \
            "benches/waiting/$prog.c" "$1/libflowctrl.a" -lpthread -ldl -lm -o "$3/$prog"
    done
}
compile target/release include "$out/new"
compile "$base/target/release" "$base/include" "$out/old"

install_python_module
# The client needs nothing but the standard library; the app needs these
# (setup.sh installs them for the recipes' tests too).
"$VENV/bin/python" -c 'import uvicorn, starlette'
# The old Python module, in a venv of its own beside the old tree.
old_venv="$base/.venv"
if ! "$old_venv/bin/python" -c 'import flowctrl, uvicorn, starlette' 2>/dev/null; then
    python3 -m venv "$old_venv"
    "$old_venv/bin/python" -m pip install -q --disable-pip-version-check \
        "maturin>=1.9,<2" "uvicorn>=0.30,<1" "starlette>=0.40,<2"
    PATH="$old_venv/bin:$PATH" "$old_venv/bin/python" -m pip install -q --disable-pip-version-check \
        --no-build-isolation --no-deps "$base/bindings/python"
fi

# 3. The fast path first, while nothing of ours runs beside it.
fast_iterations=500000
for _ in $(seq "$FAST_RUNS"); do
    for lib in old new; do
        fresh_table
        "$out/$lib/fastpath" "$table" "$fast_iterations" | sed "s/^/$lib /" >> "$results/fastpath.txt"
    done
done

# One load run of waitload: <name> <lib> <mode> <seconds> <procs> <threads>
# <timeout ms> <hold ms> <order> [rate]; its files go to $results/<name>.
load() {
    local name="$1" lib="$2" mode="$3" seconds="$4"
    shift 4
    mkdir -p "$results/$name"
    fresh_table
    "$out/$lib/waitload" "$mode" "$table" "$seconds" "$results/$name/s" "$@"
}

# 1. The closed loop, old and new alternately.
closed_seconds=10
for k in $(seq "$RUNS"); do
    for lib in new old; do
        load "closed-$lib-$k" "$lib" closed "$closed_seconds" 4 8 3000 20 fifo
    done
done

# 2. Open-loop arrivals at 3 × capacity. 4 × 64 threads: enough that every
# arrival finds a free thread (at most ~600/s × 0.32 s are in flight).
open_seconds=8
for k in $(seq "$RUNS"); do
    for order in lifo fifo; do
        load "open-$order-$k" new open "$open_seconds" 4 64 300 20 "$order" 600
    done
done

# 5. The pass-on reproducer (benches/waiting/passon.c), old and new.
passon_rounds=40
for lib in old new; do
    fresh_table
    "$out/$lib/passon" "$table" "$passon_rounds" > "$results/passon-$lib.txt"
done

# 4. uvicorn. Served once both workers answer (each reports its pid).
py_seconds=10
free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
both_workers_up() {
    "$VENV/bin/python" - "$1" <<'PY'
import socket, sys, time
pids, deadline = set(), time.time() + 30
while len(pids) < 2:
    if time.time() > deadline:
        sys.exit("uvicorn's two workers did not both answer within 30 s")
    try:
        with socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        pids.add(data.split(b"\r\n\r\n", 1)[1].split()[3])
    except OSError:
        time.sleep(0.1)
PY
}
for k in $(seq "$RUNS"); do
    for lib in new old; do
        venv="$VENV"
        [ "$lib" = old ] && venv="$old_venv"
        mkdir -p "$results/python-$lib-$k"
        fresh_table
        port="$(free_port)"
        WAITBENCH_TABLE="$table" "$venv/bin/uvicorn" pyapp:app --app-dir benches/waiting \
            --workers 2 --port "$port" --log-level warning --no-access-log &
        uvicorn_pid=$!
        both_workers_up "$port"
        "$VENV/bin/python" benches/waiting/pyclient.py "$port" "$py_seconds" 32 "$results/python-$lib-$k/s"
        kill "$uvicorn_pid"
        wait "$uvicorn_pid" || true
    done
done

load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
MACHINE="$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)" NPROC="$(nproc)" \
LOAD_BEFORE="$load_before" LOAD_AFTER="$load_after" RUNS="$RUNS" FAST_RUNS="$FAST_RUNS" \
NEW_REV="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo '+changes')" \
OLD_REV="$(git rev-parse --short "$BASE_REV")" WARMUP_S="$WARMUP_S" \
CLOSED_S="$closed_seconds" OPEN_S="$open_seconds" PY_S="$py_seconds" FAST_N="$fast_iterations" PASSON_N="$passon_rounds" \
"$VENV/bin/python" - "$results/meta.json" <<'PY'
import datetime, json, os, sys
e = os.environ
meta = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "machine": e["MACHINE"], "nproc": e["NPROC"],
    "load_before": e["LOAD_BEFORE"], "load_after": e["LOAD_AFTER"],
    "runs": int(e["RUNS"]), "new_rev": e["NEW_REV"], "old_rev": e["OLD_REV"],
    "warmup_s": int(e["WARMUP_S"]),
    "command": f"RUNS={e['RUNS']} scripts/bench-waiting.sh",
    "closed": {"procs": 4, "threads": 8, "timeout_ms": 3000, "hold_ms": 20, "seconds": int(e["CLOSED_S"])},
    "open": {"procs": 4, "threads": 64, "timeout_ms": 300, "hold_ms": 20, "rate": 600, "seconds": int(e["OPEN_S"])},
    "fastpath": {"iterations": int(e["FAST_N"]), "runs": int(e["FAST_RUNS"])},
    "passon": {"rounds": int(e["PASSON_N"])},
    "python": {"workers": 2, "connections": 32, "hold_ms": 20, "seconds": int(e["PY_S"])},
}
json.dump(meta, open(sys.argv[1], "w"), indent=1)
PY
"$VENV/bin/python" benches/waiting/report.py "$results" > benches/WAITING.md
cat benches/WAITING.md
