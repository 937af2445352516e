"""Global quota through the Python face: accuracy per slice across hosts and
processes, a Redis outage, and bad input, against real redis-server
processes (each test starts its own on a free loopback port)."""

import collections
import multiprocessing as mp
import shutil
import socket
import subprocess
import time

import pytest

import flowctrl

RATE = 2000

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None,
    reason="redis-server missing: scripts/setup.sh installs it",
)


class Redis:
    def __init__(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = None
        self.start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.02)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def command(self, *args):
        payload = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(payload.encode())
            return s.recv(65536)


@pytest.fixture
def redis():
    server = Redis()
    yield server
    server.kill()


def open_table(path, url, timeout=0.1):
    # Room for a busy 2-core machine; production keeps the 5 ms default.
    return flowctrl.Table(path, store=url, store_timeout=timeout, probe_interval=1.0)


def worker(path, url, start, seconds, fallback, queue):
    # Accuracy runs (no fallback) give the store 1 s: a late answer on a
    # shared machine would fail the store and admit by the fallback.
    table = open_table(path, url, timeout=0.1 if fallback else 1.0)
    task = table.task("api", global_rate=RATE, fallback_rate=fallback)
    while time.time() < start:
        time.sleep(0.0005)
    # An admission is counted in the slice of the clock read before and
    # after it when both agree, else as on the boundary ("s-1|s"): the
    # process may be descheduled anywhere between the two.
    counts = collections.Counter()
    errors, slowest, admitted, offset = 0, 0.0, 0, 0
    end = start + seconds
    while time.time() < end:
        before = time.time()
        try:
            permit = task.try_acquire()
        except flowctrl.FlowctrlError:
            errors += 1
            continue
        after = time.time()
        slowest = max(slowest, after - before)
        if permit is None:
            time.sleep(0.0003)
            continue
        offset = task.stats()["clock_offset_us"]
        a, b = (int((t * 1e6 + offset) // 1_000_000) for t in (before, after))
        counts[a if a == b else f"{a}|{b}"] += 1
        admitted += 1
        permit.release()
    queue.put((dict(counts), errors, slowest, admitted))


def run(hosts, per_host, seconds, fallback=0.0, during=None):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    start = time.time() + 0.5
    procs = [
        ctx.Process(target=worker, args=(path, url, start, seconds, fallback, queue))
        for path, url in hosts for _ in range(per_host)
    ]
    for p in procs:
        p.start()
    if during:
        during(start)
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
        assert p.exitcode == 0
    return results


def assert_accurate(results):
    total = collections.Counter()
    for counts, errors, _, _ in results:
        assert errors == 0
        total.update(counts)
    slices = sorted(s for s in total if isinstance(s, int))
    assert len(slices) >= 4, total
    for s in slices[1:-1]:
        edges = total.get(f"{s - 1}|{s}", 0) + total.get(f"{s}|{s + 1}", 0)
        assert total[s] <= 1.01 * RATE and total[s] + edges >= 0.98 * RATE, (s, total)


def test_embedded_store_one_host_three_processes(tmp_path):
    assert_accurate(run([(tmp_path / "t", None)], 3, 5.0))


def test_redis_two_hosts_three_processes(tmp_path, redis):
    hosts = [(tmp_path / "a", redis.url), (tmp_path / "b", redis.url)]
    assert_accurate(run(hosts, 3, 5.0))


def test_redis_killed_and_restarted(tmp_path, redis):
    path = tmp_path / "t"
    task = open_table(path, redis.url).task("api", global_rate=RATE, fallback_rate=400)
    seen = []

    def outage(start):
        while time.time() < start + 1.5:
            time.sleep(0.001)
        redis.kill()
        while task.stats()["quota_state"] != "failed":
            assert time.time() < start + 3.4
            time.sleep(0.001)
        seen.append("failed")
        while time.time() < start + 3.5:
            time.sleep(0.001)
        redis.start()
        # Probes every second ±20 %; on a loaded machine the first one after
        # the restart can still fail (a connect refused at once), so two.
        while task.stats()["quota_state"] == "failed":
            assert time.time() < start + 6.0, "not back within two probe intervals"
            time.sleep(0.001)
        seen.append("recovered")

    results = run([(path, redis.url)], 2, 6.5, fallback=400.0, during=outage)
    assert seen == ["failed", "recovered"]
    for _, errors, slowest, admitted in results:
        assert errors == 0 and admitted > 1000
        assert slowest < 0.18, slowest
    stats = task.stats()
    assert stats["failed_pulls"] >= 1 and stats["failed_ms"] >= 1000, stats


def test_pull_quota_and_bad_input(tmp_path, redis):
    table = open_table(tmp_path / "t", redis.url)
    task = table.task("warm", global_rate=1000, slice_ms=60_000)
    assert task.pull_quota(100) == 100
    assert task.stats()["quota_granted"] == 100
    assert task.stats()["quota_shards_down"] == 0  # one key: never spread
    assert task.stats()["quota_reserved"] == 0  # one host: nothing reserved
    # The embedded store: nobody to give idle quota to.
    assert task.stats()["quota_returned"] == 0
    assert task.settings["global_rate"] == 1000 and task.settings["slice_ms"] == 60_000
    with pytest.raises(flowctrl.InvalidArgumentError):
        task.pull_quota(0)
    with pytest.raises(flowctrl.InvalidArgumentError):
        table.task("none").pull_quota(1)
    for bad in [dict(global_rate=-1), dict(global_rate=float("nan")),
                dict(global_rate=10, slice_ms=50), dict(global_rate=10, slice_ms=70_000)]:
        with pytest.raises(flowctrl.InvalidArgumentError):
            table.task("bad", **bad)
    with pytest.raises(flowctrl.InvalidArgumentError):
        flowctrl.Table(tmp_path / "u", store="http://nowhere")
    with pytest.raises(flowctrl.InvalidArgumentError):
        flowctrl.Table(tmp_path / "u", store_timeout=-1)
    # Unreachable: opening works, decisions fall back, pulls say why.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = open_table(tmp_path / "d", f"redis://127.0.0.1:{port}/0").task(
        "d", global_rate=1000, fallback_rate=50)
    assert down.try_acquire() is not None
    assert down.stats()["quota_state"] == "failed"
    with pytest.raises(flowctrl.StoreError) as e:
        down.pull_quota(10)
    assert isinstance(e.value, ConnectionError) and str(port) in str(e.value)


def test_exhausted_slice_is_limited_global(tmp_path):
    task = flowctrl.Table(tmp_path / "t").task(
        "g", global_rate=100, slice_ms=60_000, global_burst=6000)
    admitted = 0
    with pytest.raises(flowctrl.Limited) as e:
        while True:
            task.acquire().release()
            admitted += 1
    assert e.value.reason == "global"
    assert admitted == 100 * 60  # one slice of 60 s, all of it on this host
    assert task.stats()["quota_state"] == "limited"


def test_fallback_policies_through_the_python_face(tmp_path, redis):
    table = open_table(tmp_path / "t", redis.url)
    share = table.task("share", global_rate=1000)
    assert share.settings["fallback"] == "share" and share.settings["fallback_rate"] == 0
    deny = table.task("deny", global_rate=1000, chunk=1, fallback="deny")
    rate = table.task("rate", global_rate=1000, chunk=1, fallback=25)
    assert rate.settings["fallback"] == 25 and rate.settings["fallback_rate"] == 25
    assert table.task("rate", fallback_rate=25).settings["fallback"] == 25
    with pytest.raises(flowctrl.ConfigMismatchError, match="fallback 25 \\(asked deny\\)"):
        table.task("rate", fallback="deny")
    for bad in [dict(fallback="sometimes"), dict(fallback=-1),
                dict(fallback="deny", fallback_rate=3)]:
        with pytest.raises(flowctrl.InvalidArgumentError):
            table.task("bad", global_rate=10, **bad)
    deny.acquire().release()
    redis.kill()
    for _ in range(20):
        assert deny.try_acquire() is None
    stats = deny.stats()
    assert stats["quota_state"] == "failed"
    assert stats["limited_fallback"] == 20 and stats["limited_global"] == 0
    with pytest.raises(flowctrl.Limited) as e:
        deny.acquire()
    assert e.value.reason == "global"


def test_a_key_created_anew_deducts_what_the_host_took(tmp_path, redis):
    # A minute-long slice, well inside it: the pulls below share one slice.
    while 60 - time.time() % 60 < 10:
        time.sleep(0.5)
    slice_id = int(time.time() // 60)
    task = open_table(tmp_path / "t", redis.url, timeout=1.0).task(
        "api", global_rate=100, slice_ms=60_000, global_burst=6000)
    assert task.pull_quota(40) == 40
    redis.command("FLUSHALL")
    assert task.pull_quota(10) == 10
    reply = redis.command("HGET", f"flowctrl:{{api}}:{slice_id}", "left")
    assert reply.split(b"\r\n")[1] == str(6000 - 40 - 10).encode(), reply


def test_the_census_through_the_python_face(tmp_path, redis):
    tables = [open_table(tmp_path / f"h{i}", redis.url, timeout=1.0) for i in range(2)]
    named = open_table(tmp_path / "n", redis.url, timeout=1.0)
    named_host = flowctrl.Table(tmp_path / "m", store=redis.url, store_timeout=1.0, host_id="edge-7")
    tasks = [t.task("api", global_rate=1000, global_burst=1000) for t in tables + [named_host]]
    del named
    # Early in a second, so the pulls share one slice; then read it.
    time.sleep(1.05 - time.time() % 1)
    for i, task in enumerate(tasks):
        assert task.pull_quota(10 * (i + 1)) == 10 * (i + 1)
    time.sleep(1.02 - time.time() % 1)
    fleet = flowctrl.Store(redis.url).fleet("api")
    assert fleet["slice_ms"] == 1000 and fleet["quota"] == 1000, fleet
    hosts = {h["host"]: h for h in fleet["hosts"]}
    assert len(hosts) == 3 and "edge-7" in hosts, fleet
    assert hosts["edge-7"]["granted"] == 30 and hosts["edge-7"]["asked"] == 30
    assert sorted(h["granted"] for h in fleet["hosts"]) == [10, 20, 30]
    assert tasks[0].stats()["host_conflicts"] == 0
    for bad in [dict(url="http://x"), dict(url=redis.url, timeout=-1)]:
        with pytest.raises(flowctrl.InvalidArgumentError):
            flowctrl.Store(**bad)
    with pytest.raises(flowctrl.InvalidNameError):
        flowctrl.Store(redis.url).fleet("")
    with pytest.raises(flowctrl.InvalidArgumentError):
        flowctrl.Table(tmp_path / "bad", store=redis.url, host_id="two words")


def test_a_stored_record_wins_until_removed_through_the_python_face(tmp_path, redis):
    store = flowctrl.Store(redis.url, timeout=1.0)
    assert store.task("api") is None
    # Two hosts (tables of their own), each with its own numbers.
    own = {"a": 3000.0, "b": 2000.0}
    tasks = {h: open_table(tmp_path / h, redis.url, timeout=1.0).task("api", global_rate=r)
             for h, r in own.items()}
    for task in tasks.values():
        assert task.pull_quota(10) == 10
        assert task.settings["global_source"] == "local"
    version = store.set_task("api", global_rate=1000, slice_ms=500)
    assert isinstance(version, int) and version > 0
    assert store.task("api") == {
        "version": version, "global_rate": 1000.0, "slice_ms": 500, "chunk": 0,
        "fallback": "share", "global_burst": 0, "shards": 1,
    }
    # Adopted at each host's next pull, not before.
    for h, task in tasks.items():
        s = task.settings
        assert (s["global_source"], s["global_rate"], s["slice_ms"]) == ("local", own[h], 1000)
        assert task.pull_quota(10) == 10
        s = task.settings
        assert (s["global_source"], s["global_rate"], s["slice_ms"]) == ("store", 1000.0, 500), s
        assert (s["local_rate"], s["limiter"]) == (0.0, "fixed"), "the local fields are its own"
    # A change of the record reaches every host at its next pull.
    changed = store.set_task("api", global_rate=400, chunk=5, fallback="deny", global_burst=100)
    assert changed > version
    assert store.task("api") == {
        "version": changed, "global_rate": 400.0, "slice_ms": 1000, "chunk": 5,
        "fallback": "deny", "global_burst": 100, "shards": 1,
    }
    for task in tasks.values():
        assert task.pull_quota(10) == 10
        s = task.settings
        assert (s["global_source"], s["global_rate"], s["slice_ms"], s["chunk"],
                s["fallback"], s["global_burst"]) == ("store", 400.0, 1000, 5, "deny", 100), s
    # Removed: once; then every host is back to its own numbers.
    assert store.remove_task("api") is True
    assert store.remove_task("api") is False
    assert store.task("api") is None
    for h, task in tasks.items():
        assert task.pull_quota(10) == 10
        s = task.settings
        assert (s["global_source"], s["global_rate"], s["slice_ms"], s["chunk"],
                s["fallback"], s["global_burst"]) == ("local", own[h], 1000, 0, "share", 0), s


def test_bad_records_are_refused_through_the_python_face(tmp_path, redis):
    store = flowctrl.Store(redis.url, timeout=1.0)
    for bad, says in [(dict(global_rate=0), "global_rate"),
                      (dict(global_rate=-1), "global_rate"),
                      (dict(global_rate=float("nan")), "global_rate"),
                      (dict(global_rate=100, slice_ms=5), "slice_ms"),
                      (dict(global_rate=100, fallback="maybe"), "fallback"),
                      (dict(global_rate=100, shards=0), "shards"),
                      (dict(global_rate=100, shards=7), "shards")]:
        with pytest.raises(flowctrl.InvalidArgumentError, match=says) as e:
            store.set_task("api", **bad)
        assert isinstance(e.value, ValueError), bad
    with pytest.raises(TypeError):
        store.set_task("api")  # global_rate is required
    for call in [lambda: store.set_task("", global_rate=10),
                 lambda: store.task(""), lambda: store.remove_task("")]:
        with pytest.raises(flowctrl.InvalidNameError):
            call()
    assert store.task("api") is None, "nothing written"
    assert redis.command("EXISTS", "flowctrl:cfg:{api}") == b":0\r\n"

    # A record written by hand, as an operator's typo would: refused with
    # its field, and the host keeps spending by its own numbers.
    task = open_table(tmp_path / "t", redis.url, timeout=1.0).task("api", global_rate=1000)
    assert redis.command("HSET", "flowctrl:cfg:{api}", "version", "5",
                         "global_rate", "-5") == b":2\r\n"
    with pytest.raises(flowctrl.InvalidArgumentError, match="global_rate") as e:
        store.task("api")
    assert isinstance(e.value, ValueError) and "-5" in str(e.value), e.value
    for _ in range(2):
        assert task.pull_quota(10) == 10
        s = task.settings
        assert (s["global_source"], s["global_rate"]) == ("local", 1000.0), s
    # A good record replaces it and is adopted; a bad edit of it keeps the
    # good numbers in force.
    store.set_task("api", global_rate=400)
    assert store.task("api")["global_rate"] == 400.0
    assert task.pull_quota(10) == 10
    assert (task.settings["global_source"], task.settings["global_rate"]) == ("store", 400.0)
    redis.command("HSET", "flowctrl:cfg:{api}", "version", "9007199254740000",
                  "fallback", "maybe")
    with pytest.raises(flowctrl.InvalidArgumentError, match="fallback"):
        store.task("api")
    assert task.pull_quota(10) == 10
    assert (task.settings["global_source"], task.settings["global_rate"]) == ("store", 400.0)
    assert store.remove_task("api") is True
    assert task.pull_quota(10) == 10
    assert (task.settings["global_source"], task.settings["global_rate"]) == ("local", 1000.0)


def test_a_task_spread_over_shards_through_the_python_face(tmp_path, redis):
    store = flowctrl.Store(redis.url, timeout=1.0)
    version = store.set_task("hot", global_rate=1000, shards=3)
    assert store.task("hot")["shards"] == 3
    task = open_table(tmp_path / "t", redis.url, timeout=1.0).task("hot", global_rate=1000)
    assert task.settings["shards"] == 1, "its own number until its next pull"
    assert task.pull_quota(30) == 30
    assert (task.settings["global_source"], task.settings["shards"]) == ("store", 3)
    # Shard 0 keeps the key names of a task that is not spread; the others
    # have hash tags of their own (`hot#<i>.<n>`, n chosen for the slot)
    # and copies of the record.
    found = redis.command("KEYS", "flowctrl:cfg:{hot#2.*}:shard2").split(b"\r\n")
    assert found[0] == b"*1", found
    copy = found[2].decode()
    assert redis.command("HGET", copy, "version") \
        == b"$%d\r\n%d\r\n" % (len(str(version)), version)
    with pytest.raises(flowctrl.InvalidArgumentError, match="shards"):
        open_table(tmp_path / "u", redis.url).task("other", global_rate=10, shards=9)
    assert store.remove_task("hot") is True
    assert redis.command("EXISTS", copy) == b":0\r\n"
