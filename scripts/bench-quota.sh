#!/usr/bin/env bash
# Global-quota benchmarks against a real Redis started here on a free
# loopback port (and stopped by its pid), from Rust (against one INCR per
# request) and from Python (against the `limits` package over Redis): writes
# benches/QUOTA.md.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
start_redis
cargo bench --bench quota --no-run -q
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "limits[redis]"
install_python_module
{
    echo "# Global quota benchmark"
    echo
    echo "Measured $(date -u +%F) on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on the same host (loopback)."
    echo "Produced by \`./scripts/bench-quota.sh\`. One process, one thread, 3 s per row."
    echo "The machine is a shared 2-core VM: read ratios, not absolutes."
    echo
    FLOWCTRL_BENCH_REDIS="redis://127.0.0.1:$port/0" cargo bench --bench quota -q
    echo
    "$VENV/bin/python" benches/quota_python.py "redis://127.0.0.1:$port/0"
    # Sections measured by tests, not by this script, are kept.
    sed -n '/^## Redis commands per admission/,$p' benches/QUOTA.md | sed '1s/^/\n/'
} > target/QUOTA.md.new
mv target/QUOTA.md.new benches/QUOTA.md
cat benches/QUOTA.md
