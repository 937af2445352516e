"""The overload experiment: every limiter against a service of 8 slots
whose service time goes from 50 ms to 100 ms at second 10.

    python run.py [--rows auto,fixed-8,...] [--clients 1,4] [--report-only]

Each row: a fresh table, the service (server.py), and 1 or 4 client
processes (client.py) sending open-loop arrivals at 300/s in all through the
Python binding for 20 s. This process samples the host-wide limit and
in-flight count every 20 ms. Raw results go to target/overload/, the report
to benches/OVERLOAD.md and the plots to benches/overload/.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import flowctrl

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RAW = ROOT / "target" / "overload"
RATE = 300.0
SECONDS = 20.0
SWITCH = 10.0
FAST_MS, SLOW_MS = 50.0, 100.0
TIMEOUT = 1.0
BEFORE, AFTER = (2.0, 10.0), (12.0, 20.0)

ROWS = {
    "fixed-4": {"max_concurrency": 4},
    "fixed-8": {"max_concurrency": 8},
    "fixed-16": {"max_concurrency": 16},
    "fixed-64": {"max_concurrency": 64},
    "fixed-256": {"max_concurrency": 256},
    "aimd": {"limiter": "aimd"},
    "vegas": {"limiter": "vegas"},
    "gradient2": {"limiter": "gradient2"},
    "auto": {"limiter": "auto"},
}


def run_row(name: str, clients: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="flowctrl-overload-") as tmp:
        table_path = os.path.join(tmp, "table")
        task = flowctrl.Table(table_path).task("backend", **ROWS[name])
        start = time.monotonic() + 2.0
        port_file = os.path.join(tmp, "port")
        server = subprocess.Popen(
            [sys.executable, str(HERE / "server.py"), port_file, str(start + SWITCH),
             str(FAST_MS), str(SLOW_MS)]
        )
        try:
            while not os.path.exists(port_file):
                time.sleep(0.01)
            port = Path(port_file).read_text()
            outs = [os.path.join(tmp, f"client{i}.json") for i in range(clients)]
            procs = [
                subprocess.Popen(
                    [sys.executable, str(HERE / "client.py"), table_path, port,
                     str(RATE / clients), str(start), str(SECONDS), str(1000 + i),
                     str(TIMEOUT), out]
                )
                for i, out in enumerate(outs)
            ]
            samples = []
            while time.monotonic() < start + SECONDS + TIMEOUT:
                now = time.monotonic() - start
                if now >= 0:
                    s = task.stats()
                    samples.append([now, task.limit or 0, s["in_flight"]])
                time.sleep(0.02)
            for p in procs:
                if p.wait(120) != 0:
                    raise SystemExit(f"{name}: a client failed")
            rows = [r for out in outs for r in json.loads(Path(out).read_text())]
        finally:
            server.kill()
            server.wait()
    return {"name": name, "clients": clients, "requests": rows, "samples": samples}


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summary(result: dict, span: tuple[float, float]) -> dict:
    lo, hi = span
    reqs = [r for r in result["requests"] if lo <= r[0] < hi]
    sent = [r[2] for r in reqs if r[1]]
    ok = sum(1 for r in reqs if r[3])
    limits = [s[1] for s in result["samples"] if lo <= s[0] < hi]
    return {
        "arrivals": len(reqs),
        "rejected": sum(1 for r in reqs if not r[1]),
        "dropped": sum(1 for r in reqs if r[1] and not r[3]),
        "ok": ok,
        "goodput": ok / (hi - lo),
        "rate": ok / len(reqs) if reqs else 0.0,
        "p50": pct(sent, 0.5) * 1000,
        "p99": pct(sent, 0.99) * 1000,
        "limit": statistics.fmean(limits) if limits else float("nan"),
    }


def reconverged(result: dict) -> float | None:
    """Seconds after the switch until the limit's median over the last
    second stays within max(1, 10 %) of its median over 14–20 s (a probe of
    a few hundred ms is not a divergence); None without an adaptive limit."""
    if result["name"].startswith("fixed"):
        return None
    samples = result["samples"]
    settled = statistics.median(s[1] for s in samples if s[0] >= 14.0)
    band = max(1.0, 0.1 * settled)
    outside = []
    for t, _, _ in samples:
        if t < SWITCH:
            continue
        recent = [s[1] for s in samples if t - 1.0 < s[0] <= t]
        if abs(statistics.median(recent) - settled) > band:
            outside.append(t)
    return (max(outside) - SWITCH) if outside else 0.0


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b, c) = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    t = [s[0] for s in result["samples"]]
    a.step(t, [s[1] for s in result["samples"]], where="post", color="tab:blue")
    a.set_ylabel("limit")
    b.plot(t, [s[2] for s in result["samples"]], color="tab:orange", lw=0.8)
    b.set_ylabel("in flight")
    sent = [r for r in result["requests"] if r[1]]
    c.scatter([r[0] for r in sent], [r[2] * 1000 for r in sent], s=2,
              c=["tab:green" if r[3] else "tab:red" for r in sent])
    c.set_ylabel("latency (ms)")
    c.set_yscale("log")
    c.set_xlabel("seconds (service time 50 → 100 ms at 10 s)")
    for ax in (a, b, c):
        ax.axvline(SWITCH, color="grey", ls="--", lw=0.8)
        ax.grid(alpha=0.3)
    who = f"{result['clients']} client process" + ("es" if result["clients"] > 1 else "")
    a.set_title(f"{result['name']}: 300 req/s offered, 8 slots, {who}")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def table_md(results: list[dict]) -> list[str]:
    out = [
        "| row | arrivals | rejected | dropped | successes | success rate | goodput/s "
        "| p50 ms | p99 ms | mean limit | after: goodput/s | after: p99 ms "
        "| after: mean limit | re-converged (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        b, a, rc = summary(r, BEFORE), summary(r, AFTER), reconverged(r)
        out.append(
            f"| {r['name']} | {b['arrivals']} | {b['rejected']} | {b['dropped']} | {b['ok']} "
            f"| {b['rate']:.0%} | {b['goodput']:.1f} | {b['p50']:.0f} | {b['p99']:.0f} "
            f"| {b['limit']:.1f} | {a['goodput']:.1f} | {a['p99']:.0f} | {a['limit']:.1f} "
            f"| {'—' if rc is None else f'{rc:.1f}'} |"
        )
    return out


def budgets(results: list[dict]) -> list[str]:
    out = []
    for clients in sorted({r["clients"] for r in results}):
        rows = {r["name"]: r for r in results if r["clients"] == clients}
        if "auto" not in rows:
            continue
        fixed = [summary(r, BEFORE)["goodput"] for n, r in rows.items() if n.startswith("fixed")]
        b, a = summary(rows["auto"], BEFORE), summary(rows["auto"], AFTER)
        rc = reconverged(rows["auto"])
        best = max(fixed) if fixed else float("nan")
        checks = [
            ("goodput within 2 % of the best fixed row (2–10 s)",
             f"{b['goodput']:.1f}/s vs {best:.1f}/s ({b['goodput'] / best - 1:+.1%})",
             b["goodput"] >= 0.98 * best),
            ("p99 ≤ 1.5 × 50 ms = 75 ms before the switch", f"{b['p99']:.0f} ms",
             b["p99"] <= 75),
            ("p99 ≤ 1.3 × 100 ms = 130 ms after it (12–20 s)", f"{a['p99']:.0f} ms",
             a["p99"] <= 130),
            ("limit re-converged within 2 s", f"{rc:.1f} s", rc is not None and rc <= 2),
            ("never stuck (mean limit after ≥ 4)", f"{a['limit']:.1f}", a["limit"] >= 4),
        ]
        out.append(f"**{clients} client process{'es' if clients > 1 else ''}:**")
        out.append("")
        out += [f"- {'met' if ok else '**missed**'}: {what}: {value}" for what, value, ok in checks]
        out.append("")
    return out


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()}, {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}"


def report(results: list[dict], note: str) -> None:
    lines = [
        "# Overload experiment",
        "",
        "Reproduce with `scripts/overload.sh` (about 8 minutes). A service with 8 slots holds "
        "each request 50 ms (capacity ≈ 160/s; excess requests queue in the server), "
        "then 100 ms from second 10 (≈ 80/s). Clients offer 300 requests/s, open loop "
        "(Poisson), for 20 s, and send a request only when the limiter admits it "
        f"(Python binding); a request slower than {TIMEOUT:.0f} s is released as dropped. "
        "Columns before \"after\" cover seconds 2–10 (service 50 ms), \"after\" columns "
        "12–20 (100 ms). Latency is of the requests sent. Re-converged: seconds after "
        "the switch until the limit's 1-second running median stays within "
        "max(1, 10 %) of where it settles (its median over 14–20 s).",
        "",
        f"Run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {machine()}. {note}",
        "",
    ]
    for clients in sorted({r["clients"] for r in results}):
        rows = [r for r in results if r["clients"] == clients]
        lines += [f"## {clients} client process{'es' if clients > 1 else ''}", ""]
        lines += table_md(rows) + [""]
    lines += ["## Budgets of `auto`", ""] + budgets(results)
    lines += ["## Plots (capacity change at 10 s)", ""]
    for r in results:
        png = f"overload/{r['name']}-{r['clients']}p.png"
        plot(r, HERE.parent / png)
        lines.append(f"- [{r['name']}, {r['clients']} process(es)]({png})")
    (HERE.parent / "OVERLOAD.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    RAW.mkdir(parents=True, exist_ok=True)
    results = []
    for clients in [int(c) for c in args.clients.split(",")]:
        for name in args.rows.split(","):
            raw = RAW / f"{name}-{clients}p.json"
            if not args.report_only:
                print(f"{name}, {clients} client process(es)...", flush=True)
                raw.write_text(json.dumps(run_row(name, clients)))
            results.append(json.loads(raw.read_text()))
            s = summary(results[-1], BEFORE)
            print(f"  {name}/{clients}: {s['goodput']:.1f}/s p99 {s['p99']:.0f} ms "
                  f"limit {s['limit']:.1f}", flush=True)
    report(results, args.note)


if __name__ == "__main__":
    main()
