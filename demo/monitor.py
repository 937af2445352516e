"""Prints, once a second, what each process attached to a task was admitted
and refused, and the host total — which holds the task's local rate."""

import argparse
import time

import flowctrl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("task")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--label", action="append", default=[], help="PID=NAME")
    args = ap.parse_args()
    labels = dict(item.split("=", 1) for item in args.label)
    table = flowctrl.Table(args.table)
    task = table.task(args.task)
    limit = task.settings["local_rate"]
    by_pid = lambda: {row["pid"]: row for row in task.stats_by_process()}  # noqa: E731
    previous = by_pid()
    end = time.monotonic() + args.seconds
    tick = 0
    while time.monotonic() < end:
        time.sleep(1.0)
        tick += 1
        current = by_pid()
        rows = []
        total_admitted = total_limited = 0
        for pid, s in sorted(current.items()):
            if str(pid) not in labels:
                continue  # the monitor itself, or a stranger
            before = previous.get(pid, {"admitted": 0, "limited_local": 0})
            admitted = s["admitted"] - before["admitted"]
            limited = s["limited_local"] - before["limited_local"]
            total_admitted += admitted
            total_limited += limited
            rows.append((labels[str(pid)], pid, admitted, limited))
        previous = current
        limit = task.settings["local_rate"]  # the config file may change it
        print(f"\n── second {tick} ── task {args.task!r}, local_rate {limit:g}/s for the host")
        print(f"{'worker':<10} {'pid':>8} {'admitted/s':>11} {'limited/s':>10}")
        for label, pid, admitted, limited in rows:
            print(f"{label:<10} {pid:>8} {admitted:>11} {limited:>10}")
        print(f"{'HOST':<10} {'':>8} {total_admitted:>11} {total_limited:>10}", flush=True)


if __name__ == "__main__":
    main()
