#!/usr/bin/env bash
# The dynamic-threshold run of tests/manager_dynamic.rs (3 host processes, a
# real HTTP backend whose capacity halves and comes back, `flowctrl manage`
# moving the threshold), its series kept and drawn: writes
# benches/manager-dynamic.csv and benches/manager-dynamic.png.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check matplotlib
FLOWCTRL_PLOT_CSV="$ROOT/benches/manager-dynamic.csv" \
    cargo test -q --test manager_dynamic -- --nocapture 2>&1 | grep -E "halved|restored|test result"
"$VENV/bin/python" - <<'PY'
import csv
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = [r for r in open("benches/manager-dynamic.csv") if not r.startswith("#")]
data = list(csv.DictReader(rows))
t = [float(r["t"]) for r in data]
fig, ax = plt.subplots(figsize=(9, 4.5))
for key, label, style in [
    ("capacity", "backend capacity", "k:"),
    ("threshold", "threshold (manager)", "C0-"),
    ("admitted", "admitted", "C2-"),
    ("success", "goodput", "C1-"),
    ("dropped", "dropped", "C3-"),
]:
    ax.plot(t, [float(r[key]) for r in data], style, label=label, drawstyle="steps-post")
ax.set_xlabel("seconds (slices of 0.5 s)")
ax.set_ylabel("requests/s")
ax.set_title("flowctrl manage: dynamic threshold (dropped ratio ≤ 5 %), 3 hosts, capacity halved then restored")
ax.legend(loc="upper right", fontsize=8)
ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig("benches/manager-dynamic.png", dpi=110)
print("wrote benches/manager-dynamic.png")
PY
