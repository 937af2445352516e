#!/usr/bin/env bash
# Runs the benchmarks (criterion against governor; Python against `limits`)
# and writes the figures to benches/RESULTS.md.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check limits
install_python_module
cargo bench --bench acquire
mkdir -p target/bench
"$VENV/bin/python" benches/python_pair.py > target/bench/python.json
"$VENV/bin/python" benches/report.py target/bench/python.json > benches/RESULTS.md
cat benches/RESULTS.md
