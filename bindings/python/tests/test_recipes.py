"""The deployment recipes of docs/guide/recipes.md, run for real: gunicorn (with and without
--preload) and uvicorn --workers 2 serve the apps in tests/recipes/ on a
free loopback port, and concurrent clients check that the host-wide cap
holds across the workers, that a SIGKILLed worker's permits come back, and
that no permit is left once the server is stopped (by its pid).

The cap is checked twice: by the table's own counters (exactly: admitted
equals the 200s) and independently, from the responses: each 200 carries
the monotonic ns just after its acquire and just before its release (one
clock for the whole host), and at no instant may more than the cap of those
intervals overlap. Reaching the cap exactly is required too, so a test that
never loaded the cap cannot pass. A negative control (each worker with a
table of its own) shows the interval check catches a cap that is not
host-wide.
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import flowctrl
import pytest

APPS = Path(__file__).parent / "recipes"
CAP = 5


class Server:
    """A server started from APPS with its output in a log file; stopped by
    pid (SIGTERM, then SIGKILL), its workers too if any outlived it."""

    def __init__(self, argv, log_path, table_path, ready, workers, port_re, worker_re):
        self.log_path = log_path
        self.worker_re = worker_re
        env = dict(os.environ, RECIPE_TABLE=str(table_path), RECIPE_CAP=str(CAP))
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                argv, cwd=APPS, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        self.started = time.monotonic()
        deadline = self.started + 30
        while len(re.findall(ready, self.log())) < workers:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"{argv} did not start:\n{self.log()}")
            time.sleep(0.02)
        self.ready_s = time.monotonic() - self.started
        self.port = int(re.search(port_re, self.log()).group(1))

    def log(self):
        return self.log_path.read_text(errors="replace")

    def worker_pids(self):
        return {int(p) for p in re.findall(self.worker_re, self.log())}

    def stop(self, timeout=15.0):
        """SIGTERM, SIGKILL after ``timeout``; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in self.worker_pids():  # orphans of a master that was killed
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if sys.executable.encode() in cmdline:
                os.kill(pid, signal.SIGKILL)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def get(port, path, timeout=15.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def load(port, clients, seconds, hold):
    """``clients`` threads asking in a loop for ``seconds``: [(status, body)], [errors]."""
    results, errors = [], []
    deadline = time.monotonic() + seconds

    def client():
        while time.monotonic() < deadline:
            try:
                status, body = get(port, f"/work?hold={hold}")
            except OSError as e:
                errors.append(repr(e))
                continue
            results.append((status, body))
            if status != 200:
                time.sleep(0.01)  # a refused client backs off a little

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def peak(served):
    """The most permits held at one instant, from the responses' intervals."""
    events = sorted([(r["t0"], 1) for r in served] + [(r["t1"], -1) for r in served])
    most = inside = 0
    for _, step in events:  # at equal times the release (-1) sorts first
        inside += step
        most = max(most, inside)
    return most


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


class Holders:
    """``n`` requests that each hold a permit for ``hold`` seconds, in threads."""

    def __init__(self, port, n, hold):
        self.results = []
        self.threads = [threading.Thread(target=self._one, args=(port, hold)) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _one(self, port, hold):
        try:
            self.results.append(get(port, f"/work?hold={hold}")[0])
        except OSError as e:
            self.results.append(type(e).__name__)

    def join(self):
        for t in self.threads:
            t.join(20)
            assert not t.is_alive()
        return self.results


def run_recipe(server, table, api, refusal, report, every_refusal_counted):
    """The load, kill and shutdown checks every recipe passes."""
    pid = os.getpid()

    # 1. Load: 16 clients for a host-wide cap of 5.
    started = time.monotonic()
    results, errors = load(server.port, clients=16, seconds=1.2, hold=0.1)
    took = time.monotonic() - started
    assert errors == [], errors[:5]
    served = [json.loads(body) for status, body in results if status == 200]
    refused = sum(1 for status, _ in results if status == refusal)
    assert refused + len(served) == len(results), {s for s, _ in results}
    high = peak(served)
    seen = max(r["in_flight"] for r in served)
    pids = {r["pid"] for r in served}
    stats = api.stats()
    report.update(
        requests=len(results), ok=len(served), refused=refused, peak=high, in_flight_seen=seen,
        workers_serving=len(pids), load_s=round(took, 2), ready_s=round(server.ready_s, 2),
    )
    assert high == CAP, f"the cap was exceeded or never reached: {report}"
    assert seen <= CAP
    assert refused > 0 and len(pids) >= 2, report
    assert pids <= server.worker_pids(), (pids, server.worker_pids())
    assert stats["admitted"] == stats["released_success"] == len(served), (stats, report)
    if every_refusal_counted:  # try_acquire: one refusal per 429
        assert stats["limited_concurrency"] == refused, (stats, report)
    else:  # acquire_async: its failed tries before each 503 count too
        assert stats["limited_concurrency"] >= refused, (stats, report)
    assert stats["in_flight"] == 0 and api.check()["drift"] == 0

    # 2. A worker SIGKILLed while it holds permits: the reaper gives them back.
    before = api.stats()
    holders = Holders(server.port, 3, hold=30)
    wait_for(lambda: api.stats()["in_flight"] == 3, 15, "3 permits held")
    victims = {r["pid"]: r["in_flight"] for r in api.stats_by_process() if r["in_flight"]}
    assert sum(victims.values()) == 3 and victims.keys() <= server.worker_pids(), victims
    for victim in victims:
        os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: api.stats()["in_flight"] == 0, 2, "the reaper")
    report["reclaim_ms"] = round((time.monotonic() - killed) * 1000, 1)
    after = api.stats()
    assert after["reclaimed"] - before["reclaimed"] == 3, after
    assert api.check() == {"in_flight": 0, "held": 0, "drift": 0}
    answered = holders.join()
    assert all(isinstance(r, str) for r in answered), answered  # connections cut, no answer
    # The server replaces the worker and admits again.
    wait_for(lambda: get(server.port, "/work?hold=0")[0] == 200, 15, "a 200 after the kill")

    # 3. Stopped by pid with requests in flight: no permit is left held.
    before = api.stats()
    holders = Holders(server.port, 3, hold=0.5)
    wait_for(lambda: api.stats()["in_flight"] == 3, 15, "3 permits held")
    workers = server.worker_pids()
    code = server.stop()
    report["stop_exit"] = code
    wait_for(lambda: api.stats()["in_flight"] == 0, 3, "no permit held")
    wait_for(lambda: [r["pid"] for r in api.stats_by_process()] == [pid], 3, "no attachment but ours")
    after = api.stats()
    report["at_stop"] = {
        "released": after["released_success"] - before["released_success"],
        "reclaimed": after["reclaimed"] - before["reclaimed"],
        "answered": holders.join(),
    }
    # A graceful stop: the requests in hand finished and released their permits.
    assert report["at_stop"] == {"released": 3, "reclaimed": 0, "answered": [200, 200, 200]}, report
    assert after["admitted"] - before["admitted"] == 3
    assert table.check() == {"replaced": False, "drift": {}, "unchecked": []}
    for worker in workers:
        assert not Path(f"/proc/{worker}").exists() or b"zombie" in Path(f"/proc/{worker}/status").read_bytes()
    print(f"\n{report}")


def gunicorn(tmp_path, table_path, *args, app="wsgi_app:app"):
    argv = [sys.executable, "-m", "gunicorn", "--workers", "3", "--threads", "4",
            "--bind", "127.0.0.1:0", "--graceful-timeout", "5", *args, app]
    return Server(argv, tmp_path / "gunicorn.log", table_path, r"Booting worker with pid", 3,
                  r"Listening at: http://127\.0\.0\.1:(\d+)", r"Booting worker with pid: (\d+)")


@pytest.mark.timeout(90)
@pytest.mark.parametrize(
    "preload, app",
    [(False, "wsgi_app:app"), (True, "wsgi_app:app"), (True, "wsgi_lazy:app")],
    ids=["import-in-each-worker", "preload", "preload-register-lazily"],
)
def test_gunicorn_workers_share_one_host_wide_cap(tmp_path, preload, app):
    table_path = tmp_path / "table"
    table = flowctrl.Table(table_path)
    api = table.task("api", max_concurrency=CAP)
    with gunicorn(tmp_path, table_path, *(["--preload"] if preload else []), app=app) as server:
        # With --preload the master opened the table (an attachment holding
        # nothing) and its workers attach at their first acquire; without
        # it, each worker opened the table at import.
        wait_for(lambda: len(api.stats_by_process()) >= (2 if preload else 4), 15, "attachments")
        rows = {r["pid"]: r for r in api.stats_by_process()}
        assert (server.proc.pid in rows) == preload, rows.keys()
        if preload:
            assert len(rows) == 2, rows.keys()  # no worker attached before its first request
        report = {"preload": preload, "app": app}
        run_recipe(server, table, api, 429, report, every_refusal_counted=True)


@pytest.mark.timeout(60)
def test_a_cap_that_is_not_host_wide_is_caught(tmp_path):
    """Negative control: each worker with a table of its own admits up to
    the cap itself; the interval check sees more than the cap in flight."""
    table_path = tmp_path / "table"
    with gunicorn(tmp_path, table_path, app="wsgi_per_worker:app") as server:
        results, errors = load(server.port, clients=16, seconds=1.0, hold=0.1)
    served = [json.loads(body) for status, body in results if status == 200]
    assert errors == [] and served
    print(f"\nper-worker tables: {peak(served)} in flight at once for a cap of {CAP}")
    assert peak(served) > CAP
    assert max(r["in_flight"] for r in served) <= CAP  # each table's own count cannot tell


@pytest.mark.timeout(90)
def test_uvicorn_workers_share_one_host_wide_cap(tmp_path):
    table_path = tmp_path / "table"
    table = flowctrl.Table(table_path)
    api = table.task("api", max_concurrency=CAP)
    argv = [sys.executable, "-m", "uvicorn", "--workers", "2", "--host", "127.0.0.1", "--port", "0",
            "--no-access-log", "--timeout-graceful-shutdown", "5", "asgi_app:app"]
    with Server(argv, tmp_path / "uvicorn.log", table_path, r"Application startup complete", 2,
                r"Uvicorn running on http://127\.0\.0\.1:(\d+)", r"Started server process \[(\d+)\]") as server:
        report = {"server": "uvicorn"}
        run_recipe(server, table, api, 503, report, every_refusal_counted=False)


SHM_SCRIPT = """
import flowctrl
opened = []
try:
    for i in range(8):
        opened.append(flowctrl.Table(f"svc{i}"))  # bare names: /dev/shm/svc<i>
except flowctrl.TableIOError as e:
    print(len(opened), e)
"""


@pytest.mark.timeout(60)
def test_docker_default_dev_shm_holds_three_default_tables():
    """A container's own 64 MiB /dev/shm (Docker's default; here a tmpfs of
    that size mounted at /dev/shm in a mount namespace of its own): the
    default table is 21.0 MiB, three fit, the fourth is refused at open."""
    mount = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" -c "$1"'
    out = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, sys.executable, SHM_SCRIPT],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    print(f"\n{out.stdout.strip()}")
    assert out.stdout.startswith("3 no space for table /dev/shm/svc3 (22033408 bytes)"), out.stdout
