"""The overload experiment: every limiter against a family of services
(family.py), each with a capacity change mid-run.

    python run.py [--scenarios 8x50-halves,...] [--rows auto,fixed-8,...]
                  [--extra NAME=SPEC ...] [--repeats N] [--report-only] [--note TEXT]

Each row: a fresh table, the service (server.py), and the scenario's client
processes (client.py) sending open-loop arrivals through the Python binding;
this process samples the host-wide limit and in-flight count every 20 ms.
Raw results go to target/overload/, the report to benches/OVERLOAD.md and
one plot per scenario to benches/overload/. `--extra` adds an adaptive row
(e.g. `auto-1.5="auto tolerance=1.5"`) for exploring; `--report-only`
rebuilds the report from the raw results. `--repeats N` runs the chosen rows
of a scenario N times (all rows once, then all again: the runs of one row
are spread over the same minutes as the others'); the report gives each
column's median over a row's runs.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import flowctrl
from family import BOUNDS, FAMILY, SECONDS, SWITCH, TIMEOUT, Scenario
from report import BEFORE, report, summary

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
RAW = ROOT / "target" / "overload"


def run_row(sc: Scenario, name: str, config: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="flowctrl-overload-") as tmp:
        table_path = os.path.join(tmp, "table")
        task = flowctrl.Table(table_path).task("backend", **config)
        start = time.monotonic() + 1.5
        port_file = os.path.join(tmp, "port")
        server = subprocess.Popen(
            [sys.executable, str(HERE / "server.py"), port_file, str(start + SWITCH),
             str(sc.slots), str(sc.slots_after), str(sc.ms), str(sc.ms_after)]
        )
        try:
            while not os.path.exists(port_file):
                time.sleep(0.01)
            port = Path(port_file).read_text()
            outs = [os.path.join(tmp, f"client{i}.json") for i in range(sc.clients)]
            procs = [
                subprocess.Popen(
                    [sys.executable, str(HERE / "client.py"), table_path, port,
                     str(sc.rate / sc.clients), str(start), str(SECONDS), str(1000 + i),
                     str(TIMEOUT), out, sc.arrivals, str(sc.hold_ms)]
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
                    raise SystemExit(f"{sc.name} {name}: a client failed")
            rows = [r for out in outs for r in json.loads(Path(out).read_text())]
        finally:
            server.kill()
            server.wait()
    return {"scenario": sc.name, "name": name, "requests": rows, "samples": samples,
            "load": os.getloadavg()}


def raw_path(sc: str, name: str, run: int) -> Path:
    """The raw result of a row's `run`-th run (0: the first)."""
    return RAW / (f"{sc}-{name}.json" if run == 0 else f"{sc}-{name}.{run + 1}.json")


def load_runs(sc: str, name: str) -> list[dict]:
    """Every stored run of a row."""
    out = []
    while raw_path(sc, name, len(out)).exists():
        out.append(json.loads(raw_path(sc, name, len(out)).read_text()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", default=",".join(s.name for s in FAMILY))
    ap.add_argument("--rows", default="")
    ap.add_argument("--extra", action="append", default=[])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    RAW.mkdir(parents=True, exist_ok=True)
    wanted = [s for s in FAMILY if s.name in args.scenarios.split(",")]
    load = os.getloadavg()
    results = {}
    for sc in wanted:
        rows = sc.rows()
        rows.update({n: {"limiter": spec, **BOUNDS}
                     for n, spec in (e.split("=", 1) for e in args.extra)})
        only = args.rows.split(",") if args.rows else list(rows)
        for run in range(0 if args.report_only else args.repeats):
            for name, config in rows.items():
                if name not in only:
                    continue
                print(f"{sc.name}: {name} (run {run + 1} of {args.repeats})...", flush=True)
                result = run_row(sc, name, config)
                raw_path(sc.name, name, run).write_text(json.dumps(result))
                s = summary(result, BEFORE)
                print(f"  {sc.name} {name}: {s['goodput']:.1f}/s p99 {s['p99']:.0f} ms "
                      f"limit {s['limit']:.1f}", flush=True)
        if not args.report_only:
            # Runs of an earlier, longer series are not this one's.
            for name in only:
                stale = args.repeats
                while raw_path(sc.name, name, stale).exists():
                    raw_path(sc.name, name, stale).unlink()
                    stale += 1
        results[sc.name] = [runs for runs in (load_runs(sc.name, n) for n in rows) if runs]
    report(wanted, results, load, args.note)


if __name__ == "__main__":
    main()
