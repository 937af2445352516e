#!/usr/bin/env bash
# The overload experiment (benches/overload/): every limiter against a
# service of 8 slots whose service time doubles at second 10, with 1 and 4
# client processes. Writes benches/OVERLOAD.md and the plots in
# benches/overload/. About 8 minutes; the machine should be otherwise idle.
#
#   scripts/overload.sh [--rows auto,fixed-8] [--clients 1,4] [--report-only]
set -euo pipefail
source "$(dirname "$0")/setup.sh"
install_python_module
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "matplotlib>=3.7"
exec "$VENV/bin/python" "$ROOT/benches/overload/run.py" "$@"
