"""A client process of the balancing experiment: open-loop Poisson arrivals
sent by a pool of threads to the backend its policy picks; every request is
recorded (scheduled, sent and finished times, backend, HTTP status).

The per-process policies keep their state in this process only, as the
balancers in the field do; "flowctrl" keeps it in the shared table.

    python client.py CONFIG_JSON OUT_CSV
"""

import http.client
import json
import math
import queue
import random
import sys
import threading
import time

WORKERS = 32


class Random:
    def __init__(self, n: int) -> None:
        self.n = n

    def add(self) -> None:
        self.n += 1

    def pick(self) -> int:
        return random.randrange(self.n)

    def done(self, i: int, ok: bool, rtt: float) -> None:
        pass


class RoundRobin(Random):
    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.next = random.randrange(n)
        self.lock = threading.Lock()

    def pick(self) -> int:
        with self.lock:
            self.next = (self.next + 1) % self.n
            return self.next


def two(n: int) -> tuple[int, int]:
    a = random.randrange(n)
    b = random.randrange(n - 1)
    return a, b + 1 if b >= a else b


class LeastRequest(Random):
    """P2C least-request: the in-flight counts of this process."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.pending = [0] * n
        self.lock = threading.Lock()

    def add(self) -> None:
        with self.lock:
            self.n += 1
            self.pending.append(0)

    def pick(self) -> int:
        with self.lock:
            a, b = two(self.n)
            i = a if self.pending[a] <= self.pending[b] else b
            self.pending[i] += 1
            return i

    def done(self, i: int, ok: bool, rtt: float) -> None:
        with self.lock:
            self.pending[i] -= 1


class PeakEwma(LeastRequest):
    """P2C peak-EWMA as tower and Finagle do it: cost = rtt × (pending + 1),
    decay 10 s, a read decays (and writes) the estimate, errors are RTT
    samples like any other, seed RTT 30 ms (Linkerd's default)."""

    TAU = 10.0
    SEED = 0.030

    def __init__(self, n: int) -> None:
        super().__init__(n)
        now = time.monotonic()
        self.est = [self.SEED] * n
        self.stamp = [now] * n

    def add(self) -> None:
        with self.lock:
            self.n += 1
            self.pending.append(0)
            self.est.append(self.SEED)
            self.stamp.append(time.monotonic())

    def cost(self, i: int, now: float) -> float:
        self.est[i] *= math.exp(-(now - self.stamp[i]) / self.TAU)
        self.stamp[i] = now
        return self.est[i] * (self.pending[i] + 1)

    def pick(self) -> int:
        with self.lock:
            now = time.monotonic()
            a, b = two(self.n)
            i = a if self.cost(a, now) <= self.cost(b, now) else b
            self.pending[i] += 1
            return i

    def done(self, i: int, ok: bool, rtt: float) -> None:
        with self.lock:
            now = time.monotonic()
            self.pending[i] -= 1
            w = math.exp(-(now - self.stamp[i]) / self.TAU)
            self.est[i] = rtt if rtt > self.est[i] * w else self.est[i] * w + rtt * (1 - w)
            self.stamp[i] = now


class Flowctrl:
    """flowctrl: host-wide statistics in the shared table."""

    def __init__(self, table_path: str, addresses: list[str], known: list[str]) -> None:
        import flowctrl

        self.table = flowctrl.Table(table_path)
        self.lb = self.table.balancer("bench", backends=addresses)
        self.index = {a: i for i, a in enumerate(known)}

    def add(self, addresses: list[str], set_them: bool) -> None:
        if set_them:
            self.lb.set_backends(addresses)

    def pick(self):
        choice = self.lb.pick()
        return self.index[choice.backend], choice

    def done(self, choice, ok: bool) -> None:
        choice.release("success" if ok else "dropped")


def main() -> None:
    config = json.load(open(sys.argv[1]))
    out_path = sys.argv[2]
    random.seed(config["seed"])
    addresses: list[str] = list(config["backends"])
    join = config.get("join")  # [second, address, sets_the_table]
    known = addresses + ([join[1]] if join else [])
    policy_name = config["policy"]
    per_process = {
        "random": Random,
        "round robin": RoundRobin,
        "P2C least-request": LeastRequest,
        "P2C peak-EWMA": PeakEwma,
    }
    if policy_name == "flowctrl":
        policy = Flowctrl(config["table"], addresses, known)
    else:
        policy = per_process[policy_name](len(addresses))
    start, duration = config["start"], config["duration"]
    rate = config["rate"]
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    records: list[str] = []
    local = threading.local()
    lock = threading.Lock()

    def conn(i: int) -> http.client.HTTPConnection:
        conns = getattr(local, "conns", None)
        if conns is None:
            conns = local.conns = {}
        c = conns.get(i)
        if c is None:
            host, port = known[i].split(":")
            c = conns[i] = http.client.HTTPConnection(host, int(port), timeout=30)
        return c

    def send(i: int) -> int:
        for attempt in range(2):
            c = conn(i)
            try:
                c.request("GET", "/")
                r = c.getresponse()
                r.read()
                return r.status
            except (OSError, http.client.HTTPException):
                c.close()
                local.conns.pop(i, None)
        return 599

    def worker() -> None:
        while True:
            scheduled = jobs.get()
            if scheduled is None:
                return
            sent = time.time()
            if policy_name == "flowctrl":
                i, choice = policy.pick()
            else:
                i = policy.pick()
            status = send(i)
            end = time.time()
            ok = status == 200
            if policy_name == "flowctrl":
                policy.done(choice, ok)
            else:
                policy.done(i, ok, end - sent)
            with lock:
                records.append(f"{scheduled:.6f},{sent:.6f},{end:.6f},{i},{status}\n")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    t = start
    joined = False
    while True:
        t += random.expovariate(rate)
        if t >= start + duration:
            break
        if join and not joined and t >= start + join[0]:
            addresses.append(join[1])
            if policy_name == "flowctrl":
                policy.add(addresses, join[2])
            else:
                policy.add()
            joined = True
        delay = t - time.time()
        if delay > 0:
            time.sleep(delay)
        jobs.put(t)
    for _ in threads:
        jobs.put(None)
    for th in threads:
        th.join(timeout=60)
    with lock, open(out_path, "w") as f:
        f.writelines(records)


if __name__ == "__main__":
    main()
