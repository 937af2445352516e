#!/usr/bin/env bash
# The manager's cost against a real Redis started here on a free loopback
# port (stopped by its pid): store operations per task per slice and the
# time of one step for 10 to 10,000 tasks. Rewrites the "Cost" table of
# benches/MANAGER.md (between its cost markers).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
start_redis
cargo bench --bench manager --no-run -q
{
    echo "Measured $(date -u +%F) on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on the same host (loopback), by \`./scripts/bench-manager.sh\`; 6 s per row, slices of 1 s."
    echo
    FLOWCTRL_BENCH_REDIS="redis://127.0.0.1:$port/0" cargo bench --bench manager -q
} > target/manager-cost.md
python3 - <<'PY'
import re
doc = open("benches/MANAGER.md").read()
table = open("target/manager-cost.md").read()
start = doc.index("<!-- cost:")
start = doc.index("\n", start) + 1
end = doc.index("<!-- /cost -->")
open("benches/MANAGER.md", "w").write(doc[:start] + table + doc[end:])
PY
cat target/manager-cost.md
