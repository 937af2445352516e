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
    FLOWCTRL_SCALE_SHARDS="$4" FLOWCTRL_SCALE_CHUNK="$5" cargo bench --bench scale -q; }

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
for chunk in 1 10 100 0; do
    rows+=("$(bench "3-node cluster" "$cluster_url" "$cluster_nodes" 3 "$chunk")"); echo "${rows[-1]}" >&2
done
rows+=("$(bench "3-node cluster" "$cluster_url" "$cluster_nodes" 1 1)"); echo "${rows[-1]}" >&2

{
    echo "# Scale on one machine"
    echo
    echo "Measured $(date -u '+%F %H:%M UTC') on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
    echo "(\`nproc\`), Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), everything on the same host (loopback)."
    echo "Produced by \`./scripts/bench-scale.sh\`: 8 simulated hosts (table files, each its own host"
    echo "id) x 8 processes at saturating demand on one task (global_rate 10,000,000/s, which no run"
    echo "reaches), fixed chunks that make the store work hard, then adaptive ones (the default)."
    echo "The median of 3 runs of 5 s (by admitted/s). Store ops = pull script calls (EVALSHA) on all"
    echo "servers; Redis CPU = the servers' CPU time (user + system, \`/proc/<pid>/stat\`) per second,"
    echo "summed: 100 % = one core; µs/op = that CPU per store op; split = each server's share of the ops."
    echo
    echo "| store | shards | chunk | admitted/s | store ops/s | Redis CPU | Redis µs/op | split (%) |"
    echo "|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
    echo
    echo "The machine has $(nproc) cores for the 64 client processes and every server together, and"
    echo "shares them with other work: the clients compete with the servers for the same cores."
    echo "See the README (\"High availability and scale\") for what these rows show."
} > "$work/SCALE.md"
mv "$work/SCALE.md" benches/SCALE.md
cat benches/SCALE.md
