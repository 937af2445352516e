#!/usr/bin/env bash
# Server time of one pull script run (EVALSHA's usec_per_call in INFO
# commandstats), this tree's pull script (src/quota/script/*.lua) against the one at REV
# (default: release), on a slice key of 2 and of 20 hosts, with demand
# under the slice and over it (the fair tails' pass). A redis-server of its
# own on a free loopback port, stopped by its pid. The least of 6 runs of
# 4,000 calls each: the machine is shared, read the ratio.
#   scripts/pull-usec.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-release}
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no >/dev/null 2>&1 &
pid=$!
trap 'kill $pid' EXIT
sleep 1
c() { redis-cli -p "$port" "$@"; }
slice_ms=3600000
slice=$(( $(date +%s%3N) / slice_ms ))
echo "| hosts in the key | demand | $rev (µs) | this tree (µs) |"
echo "|---:|---|---:|---:|"
run() { # sha hosts demand: usec_per_call of 4,000 calls
    c DEL k >/dev/null
    c SET shape "$slice_ms" >/dev/null
    for i in $(seq 1 "$2"); do
        c HSET k "h$i" "1 1 1 0 -35 5 0 0 0 0 1000000000 0" >/dev/null
    done
    c HSET k left 1000000000 quota 1000000000 demand "$3" >/dev/null
    local args=(4 k cfg shape prev 1000000000 1 "$slice_ms" "$slice" 7300000 h1 0 0 0
        1000000000 0 "$slice_ms" 0 5 0 0 0 0 0)
    c EVALSHA "$1" "${args[@]}" >/dev/null
    c CONFIG RESETSTAT >/dev/null
    redis-benchmark -p "$port" -n 4000 -c 1 -q EVALSHA "$1" "${args[@]}" >/dev/null 2>&1
    c INFO commandstats | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p'
}
least() { if [ -z "$1" ] || [ "$(echo "$2 < $1" | bc -l)" = 1 ]; then echo "$2"; else echo "$1"; fi; }
# The script at a revision: one file before it was cut in sections.
script_at() {
    git show "$1:src/quota/pull.lua" 2>/dev/null ||
        for f in $(git ls-tree --name-only "$1" src/quota/script/ | grep '\.lua$'); do
            git show "$1:$f"
        done
}
old=$(c SCRIPT LOAD "$(script_at "$rev")")
new=$(c SCRIPT LOAD "$(cat src/quota/script/*.lua)")
for hosts in 2 20; do
    for demand in under over; do
        total=100
        [ "$demand" = over ] && total=2000000000
        a= b=
        # Turn about, so that a burst of the machine's load falls on both.
        for _ in 1 2 3 4 5 6; do
            a=$(least "$a" "$(run "$old" "$hosts" "$total")")
            b=$(least "$b" "$(run "$new" "$hosts" "$total")")
        done
        echo "| $hosts | $demand the slice | $a | $b |"
    done
done
