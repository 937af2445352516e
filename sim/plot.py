"""Plots the simulator's per-slice figures: python plot.py CSV PNG."""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = defaultdict(list)
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f):
        rows[r["scenario"]].append(r)

fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
for name, rs in rows.items():
    x = [int(r["slice"]) for r in rs]
    axes[0].plot(x, [float(r["admitted"]) for r in rs], marker="o", label=name)
    axes[1].plot(x, [100 * float(r["stranded"]) for r in rs], marker="o", label=name)
    axes[2].plot(x, [float(r["smallest"]) for r in rs], marker="o", label=name)
axes[0].axhspan(0.98, 1.01, color="green", alpha=0.15, label="budget")
axes[0].set_title("admitted / quota per slice (0: cold)")
axes[1].axhline(2, color="red", linestyle="--", label="budget")
axes[1].set_title("stranded, % of the quota")
axes[2].axhline(1, color="grey", linestyle="--")
axes[2].set_title("smallest host: admitted / fair share")
for ax in axes:
    ax.set_xlabel("slice")
    ax.grid(alpha=0.3)
axes[0].legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=80)
