#!/usr/bin/env bash
# Real processes at scale on one machine: 8 simulated hosts (table files) x
# 8 processes at saturating demand, with small fixed chunks so the store is
# the limit; first on one Redis, then on a 3-master Redis Cluster with the
# task spread over 3 shards. Starts every server on free loopback ports and
# stops them by pid; writes benches/SCALE.md (admitted/s, store ops/s,
# servers' CPU; medians of 3 runs of 5 s).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
wait_up() { until redis-cli -p "$1" ping >/dev/null 2>&1; do sleep 0.05; done; }
# start_server NAME PORT [CONFIG LINES...]: a redis-server in its own directory.
start_server() {
    local name=$1 port=$2; shift 2
    mkdir -p "$work/$name"
    {
        printf 'bind 127.0.0.1\nport %s\ndir %s\nsave ""\nappendonly no\n' "$port" "$work/$name"
        for line in "$@"; do echo "$line"; done
    } > "$work/$name/redis.conf"
    redis-server "$work/$name/redis.conf" >/dev/null 2>&1 &
    pids+=($!)
    wait_up "$port"
}
cargo bench --bench scale --no-run -q
bench() { FLOWCTRL_SCALE_LABEL="$1" FLOWCTRL_SCALE_URL="$2" FLOWCTRL_SCALE_NODES="$3" \
    FLOWCTRL_SCALE_SHARDS="$4" FLOWCTRL_SCALE_CHUNK="$5" FLOWCTRL_SCALE_TASK="$task" \
    cargo bench --bench scale -q; }
# capacity PORT TAG: pull-script calls/s one server answers (redis-benchmark,
# 16 connections): each call a full pull (record check, grant, census) of a
# 60-s slice key of hash tag TAG, as a host sends it.
capacity() {
    local sha slice
    sha=$(redis-cli -p "$1" script load "$(cat src/quota/script/*.lua)")
    # Inside the current minute, with room for the run.
    while [ $(( $(date +%s) % 60 )) -gt 40 ]; do sleep 1; done
    slice=$(( $(date +%s) / 60 ))
    redis-benchmark -p "$1" -c 16 -n 200000 -q EVALSHA "$sha" 4 \
        "flowctrl:{$2}:$slice" "flowctrl:cfg:{$2}" "flowctrl:{$2}:shape" "flowctrl:{$2}:$((slice - 1))" \
        1000000000 1 60000 "$slice" 122000 bench 0 0 0 1000000000 0 60000 1 0 \
        | tr '\r' '\n' | sed -n 's/.*: \([0-9.]*\) requests per second.*/\1/p' | tail -1
}
task=scale

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
port=$(free_port)
start_server single "$port"
single="$port:${pids[-1]}"
for chunk in 1 10 100 0; do
    rows+=("$(bench "one Redis" "redis://127.0.0.1:$port/0" "$single" 1 "$chunk")"); echo "${rows[-1]}" >&2
done

nodes=() ports=()
for i in 0 1 2; do
    p=$(free_port)
    # The bus port named: port + 10000, the default, may be past 65535.
    start_server "node$i" "$p" "cluster-enabled yes" "cluster-config-file nodes.conf" \
        "cluster-node-timeout 2000" "cluster-port $(free_port)"
    nodes+=("$p:${pids[-1]}") ports+=("127.0.0.1:$p")
done
redis-cli --cluster create "${ports[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
until redis-cli -p "${ports[0]##*:}" cluster info | grep -q cluster_state:ok; do sleep 0.1; done
cluster_url="redis+cluster://$(IFS=,; echo "${ports[*]}")"
cluster_nodes=$(IFS=,; echo "${nodes[*]}")
# A task whose three shards' hash tags fall on the three masters (created in
# the order given: slots 0-5460, 5461-10922, 10923-16383), in that order.
owner() { local s; s=$(redis-cli -p "${ports[0]##*:}" cluster keyslot "$1"); echo $(( s < 5461 ? 0 : s < 10923 ? 1 : 2 )); }
for i in $(seq 0 500); do
    if [ "$(owner "{scale$i}")$(owner "{scale$i#1}")$(owner "{scale$i#2}")" = 012 ]; then task=scale$i; break; fi
done
for chunk in 1 10 100 0; do
    rows+=("$(bench "3-node cluster" "$cluster_url" "$cluster_nodes" 3 "$chunk")"); echo "${rows[-1]}" >&2
done
rows+=("$(bench "3-node cluster" "$cluster_url" "$cluster_nodes" 1 1)"); echo "${rows[-1]}" >&2
# What the servers can answer: one alone, then the three masters at once.
one=$(capacity "$port" scale)
tags=("$task" "$task#1" "$task#2")
cap_pids=()
for i in 0 1 2; do capacity "${ports[$i]##*:}" "${tags[$i]}" > "$work/cap$i" & cap_pids+=($!); done
wait "${cap_pids[@]}"
three=$(cat "$work/cap0" "$work/cap1" "$work/cap2" | awk '{ s += $1 } END { printf "%.0f", s }')
echo "capacity: one $one, three $three" >&2

{
    echo "# Scale on one machine"
    echo
    echo "Measured $(date -u '+%F %H:%M UTC') on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
    echo "(\`nproc\`), Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), everything on the same host (loopback)."
    echo "Produced by \`./scripts/bench-scale.sh\`: 8 simulated hosts (table files, each its own host"
    echo "id) x 8 processes at saturating demand on one task (global_rate 10,000,000/s: only the"
    echo "adaptive rows come near it), fixed chunks that make the store work hard, then adaptive ones"
    echo "(the default)."
    echo "The median of 3 runs of 5 s (by admitted/s). Store ops = pull script calls (EVALSHA) on all"
    echo "servers; Redis CPU = the servers' CPU time (user + system, \`/proc/<pid>/stat\`) per second,"
    echo "summed: 100 % = one core; µs/op = that CPU per store op; split = each server's share of the ops."
    echo
    echo "| store | shards | chunk | admitted/s | store ops/s | Redis CPU | Redis µs/op | split (%) |"
    echo "|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "What the servers themselves answer, without flowctrl's clients: pull-script calls/s"
    echo "(\`redis-benchmark\`, 16 connections each, full pulls of a 60-s slice key):"
    echo
    echo "| servers | pull calls/s |"
    echo "|---|---|"
    echo "| one Redis | $one |"
    echo "| 3 cluster masters at once (one shard's tag each) | $three |"
    echo
    echo "The machine has $(nproc) cores for the 64 client processes and every server together, and"
    echo "shares them with other work (load average $load_before before the runs, $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "after): the clients compete with the servers for the same cores."
    echo "See benches/GLOBAL.md (\"Scale on one machine\") for what these rows show."
} > "$work/SCALE.md"
mv "$work/SCALE.md" benches/SCALE.md
cat benches/SCALE.md
