#!/usr/bin/env bash
# The manager's cost against a real Redis started here on a free loopback
# port (stopped by its pid): store operations per task per slice and the
# time of one step for 10 to 10,000 tasks. Writes benches/MANAGER.md's
# "Cost" table (benches/manager-cost.md).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no >/dev/null &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null || true' EXIT
until python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; do sleep 0.05; done
cargo bench --bench manager --no-run -q
{
    echo "Measured $(date -u +%F) on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on the same host (loopback), by \`./scripts/bench-manager.sh\`; 6 s per row, slices of 1 s."
    echo
    FLOWCTRL_BENCH_REDIS="redis://127.0.0.1:$port/0" cargo bench --bench manager -q
} > target/manager-cost.md.new
mv target/manager-cost.md.new benches/manager-cost.md
cat benches/manager-cost.md
