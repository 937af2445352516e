#!/usr/bin/env bash
# The overload experiment (benches/overload/): every limiter against a
# family of services (benches/overload/family.py: 4–32 slots, 20–200 ms,
# 1.5–3 × capacity, fixed and Poisson arrivals, capacity halving and
# doubling mid-run, 1 and 4 client processes, callers holding the permit
# or not). Writes benches/OVERLOAD.md and one plot per scenario in
# benches/overload/. About 14 minutes; the machine should be otherwise idle.
#
#   scripts/overload.sh [--scenarios 8x50-halves,...] [--rows auto,fixed-8]
#                       [--extra 'auto-1.5=auto tolerance=1.5'] [--report-only]
set -euo pipefail
source "$(dirname "$0")/setup.sh"
install_python_module
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "matplotlib>=3.7"
exec "$VENV/bin/python" "$ROOT/benches/overload/run.py" "$@"
