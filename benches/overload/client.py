"""One client process: open-loop arrivals, each sent only if the limiter
admits it, through the Python binding.

    python client.py TABLE PORT RATE START SECONDS SEED TIMEOUT OUT_JSON ARRIVALS HOLD_MS

Arrivals are a Poisson process (ARRIVALS "poisson") or evenly spaced
("fixed", phase from SEED) of RATE per second from CLOCK_MONOTONIC START for
SECONDS. An admitted request is sent on a thread of its own; its latency is
measured from send to response; the caller then holds the permit HOLD_MS
more (its own work on the answer, as real callers do) and releases it as
"success", or as "dropped" when it failed or took longer than TIMEOUT
seconds. Writes [arrival, admitted, latency or null, ok] rows to OUT_JSON.
"""

import http.client
import json
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import flowctrl


def main() -> None:
    table_path, port, rate, start, seconds, seed, timeout, out, arrivals, hold = sys.argv[1:11]
    port, rate, start, seconds = int(port), float(rate), float(start), float(seconds)
    timeout, hold = float(timeout), float(hold) / 1000
    task = flowctrl.Table(table_path).task("backend")
    rng = random.Random(int(seed))
    rows: list[list[object]] = []
    lock = threading.Lock()
    local = threading.local()

    def send(arrival: float, permit: flowctrl.Permit) -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        began = time.monotonic()
        ok = False
        try:
            conn.request("GET", "/")
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200
        except (OSError, http.client.HTTPException):
            conn.close()
            local.conn = None
        latency = time.monotonic() - began
        ok = ok and latency <= timeout
        if hold > 0:
            time.sleep(hold)
        permit.release("success" if ok else "dropped")
        with lock:
            rows.append([arrival - start, True, latency, ok])

    with ThreadPoolExecutor(max_workers=320) as pool:
        next_at = start + (rng.random() / rate if arrivals == "fixed" else 0.0)
        end = start + seconds
        while True:
            next_at += rng.expovariate(rate) if arrivals == "poisson" else 1.0 / rate
            if next_at >= end:
                break
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            permit = task.try_acquire()
            if permit is None:
                with lock:
                    rows.append([next_at - start, False, None, False])
            else:
                pool.submit(send, next_at, permit)
    with open(out, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
