#!/usr/bin/env bash
# The balancing experiment (benches/balance/): HTTP backends and four client
# processes per policy, three scenarios; writes benches/BALANCE.md and the
# PNGs under benches/balance/. Takes about 25 minutes. Not part of test.sh.
#   FLOWCTRL_BALANCE_SCALE=0.5 scripts/balance.sh   # scale every rate down
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check matplotlib
install_python_module
"$VENV/bin/python" benches/balance/run.py
