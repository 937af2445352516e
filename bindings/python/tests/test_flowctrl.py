"""The Python face of flowctrl, against real tables and real processes."""

import multiprocessing as mp
import os
import signal
import struct
import threading
import time

import pytest

import flowctrl


@pytest.fixture
def table(tmp_path):
    return flowctrl.Table(tmp_path / "table")


def test_table_file_is_private_and_reopens(tmp_path):
    path = tmp_path / "t"
    t = flowctrl.Table(path)
    assert (os.stat(path).st_mode & 0o777) == 0o600
    assert t.capacity == 256 and t.max_processes == 64
    shared = flowctrl.Table(tmp_path / "s", mode=0o640, capacity=8)
    assert (os.stat(tmp_path / "s").st_mode & 0o777) == 0o640
    assert flowctrl.Table(tmp_path / "s").capacity == 8
    assert shared.path == tmp_path / "s"


def test_acquire_release_and_statistics(table):
    task = table.task("api", max_concurrency=2)
    p = task.try_acquire()
    assert p is not None and p.n == 1 and not p.released
    with task.acquire():
        assert task.try_acquire() is None
    with pytest.raises(RuntimeError):
        with task.acquire():
            time.sleep(0.002)
            raise RuntimeError("backend failed")
    p.release("ignored")
    assert p.released
    s = task.stats()
    assert (s["admitted"], s["limited_concurrency"], s["in_flight"]) == (3, 1, 0)
    assert (s["released_success"], s["released_dropped"], s["released_ignored"]) == (1, 1, 1)
    assert s["rtt_samples"] == 2 and s["rtt_sum_ns"] >= 2_000_000


def test_limited_carries_the_reason(table):
    rated = table.task("rated", local_rate=1, burst=2)
    rated.acquire(2).release()
    with pytest.raises(flowctrl.Limited) as e:
        rated.acquire()
    assert e.value.reason == "local"
    # 1/s with the burst of 2 spent: the next admission is about 1 s away.
    assert 0.9 < e.value.retry_after <= 1.0
    # A rejection is a decision, not an error: FlowctrlError handlers let it by.
    assert not isinstance(e.value, flowctrl.FlowctrlError)
    with pytest.raises(flowctrl.Limited):
        try:
            rated.acquire()
        except flowctrl.FlowctrlError:
            pytest.fail("except FlowctrlError caught a rejection")
    capped = table.task("capped", max_concurrency=1)
    with capped.acquire():
        with pytest.raises(flowctrl.Limited) as e:
            capped.acquire()
        assert e.value.reason == "concurrency"
        assert e.value.retry_after is None
    assert rated.stats()["limited_local"] == 2
    # It survives pickling (multiprocessing sends exceptions so).
    import pickle

    copy = pickle.loads(pickle.dumps(e.value))
    assert (copy.reason, copy.retry_after) == ("concurrency", None)


def test_unreleased_permit_is_released_as_ignored_when_collected(table):
    task = table.task("gc", max_concurrency=1)
    task.acquire()
    assert task.stats()["in_flight"] == 0
    assert task.stats()["released_ignored"] == 1


def test_configuration_rules(table):
    task = table.task("svc", local_rate=100.5, burst=3, max_concurrency=7)
    settings = table.task("svc").settings
    assert {k: settings[k] for k in ("local_rate", "burst", "max_concurrency")} == {
        "local_rate": 100.5,
        "burst": 3,
        "max_concurrency": 7,
    }
    assert table.task("svc", burst=3).name == "svc"
    with pytest.raises(flowctrl.ConfigMismatchError, match="burst 3"):
        table.task("svc", burst=4)
    task.update(burst=4)
    assert table.task("svc", burst=4).settings["burst"] == 4


@pytest.mark.parametrize("name", ["", "x" * 64, "tab\tname", "nul\0name"])
def test_bad_names(table, name):
    with pytest.raises(flowctrl.InvalidNameError):
        table.task(name)


def test_bad_arguments(table):
    task = table.task("svc", local_rate=10, burst=2, max_concurrency=5)
    for n in (0, 3):
        with pytest.raises(flowctrl.InvalidArgumentError):
            task.try_acquire(n)
    with pytest.raises(OverflowError):
        task.try_acquire(-1)
    p = task.acquire()
    with pytest.raises(flowctrl.InvalidArgumentError):
        p.release("maybe")
    p.release()
    with pytest.raises(flowctrl.InvalidArgumentError, match="already released"):
        p.release()
    for bad in (dict(burst=0), dict(local_rate=-1.0), dict(local_rate=float("nan"))):
        with pytest.raises(flowctrl.InvalidArgumentError):
            task.update(**bad)
    with pytest.raises(flowctrl.InvalidArgumentError):
        flowctrl.Table(table.path.parent / "zero", capacity=0)
    assert task.stats()["in_flight"] == 0


def test_table_full(tmp_path):
    t = flowctrl.Table(tmp_path / "t", capacity=2)
    t.task("a")
    t.task("b")
    with pytest.raises(flowctrl.TableFullError):
        t.task("c")


def test_files_that_are_not_tables(tmp_path):
    garbage = tmp_path / "garbage"
    garbage.write_bytes(os.urandom(8192))
    with pytest.raises(flowctrl.CorruptTableError):
        flowctrl.Table(garbage)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(flowctrl.CorruptTableError):
        flowctrl.Table(empty)
    truncated = tmp_path / "truncated"
    flowctrl.Table(truncated)
    os.truncate(truncated, os.path.getsize(truncated) // 2)
    with pytest.raises(flowctrl.CorruptTableError, match="truncated"):
        flowctrl.Table(truncated)
    other = tmp_path / "other"
    flowctrl.Table(other)
    with open(other, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<I", 999))
    with pytest.raises(flowctrl.IncompatibleTableError, match="999"):
        flowctrl.Table(other)
    with pytest.raises(flowctrl.TableIOError):
        flowctrl.Table(tmp_path / "missing" / "dir" / "t")


def test_permission_denied(tmp_path):
    path = tmp_path / "t"
    flowctrl.Table(path)
    if os.geteuid() != 0:
        os.chmod(path, 0)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if os.geteuid() == 0:
                os.setuid(65534)
            flowctrl.Table(path)
        except flowctrl.TablePermissionError as e:
            code = 0 if isinstance(e, PermissionError) else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_threads_never_exceed_the_cap(table):
    task = table.task("threads", max_concurrency=3)
    peak = 0
    inside = 0
    lock = threading.Lock()

    def work():
        nonlocal peak, inside
        for _ in range(3000):
            p = task.try_acquire()
            if p is None:
                continue
            with lock:
                inside += 1
                peak = max(peak, inside)
            with lock:
                inside -= 1
            p.release()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak <= 3
    assert task.stats()["in_flight"] == 0


def test_a_permit_is_released_once_whatever_the_threads(table):
    task = table.task("race", max_concurrency=64)
    for _ in range(50):
        # Others held too, so the core's own check (this process holds fewer
        # than n) cannot be what stops the second release.
        held = [task.acquire() for _ in range(8)]
        target = held[0]
        barrier = threading.Barrier(4)
        results = []

        def release():
            barrier.wait()
            try:
                target.release()
                results.append("released")
            except flowctrl.InvalidArgumentError as e:
                assert "already released" in str(e)
                results.append("refused")

        threads = [threading.Thread(target=release) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == ["refused"] * 3 + ["released"]
        assert target.released
        for p in held[1:]:
            p.release()
    s = task.stats()
    assert s["in_flight"] == 0
    assert s["admitted"] == s["released_success"] == 50 * 8


def test_leaving_with_after_an_explicit_release_is_quiet(table):
    task = table.task("svc", max_concurrency=1)
    with task.acquire() as p:
        p.release("ignored")
    assert p.released and task.stats()["released_ignored"] == 1


@pytest.mark.timeout(60)
def test_a_failed_release_leaves_the_permit_unreleased(tmp_path):
    task = flowctrl.Table(tmp_path / "t").task("api", max_concurrency=1)
    permit = task.acquire()
    pid = os.fork()
    if pid == 0:  # the permit did not cross fork: releasing it here fails
        code = 1
        try:
            for _ in range(2):
                try:
                    permit.release()
                    code = 2
                    break
                except flowctrl.InvalidArgumentError as e:
                    if "already released" in str(e) or permit.released:
                        code = 3  # a failed release marked it released
                        break
            else:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not permit.released
    permit.release()
    assert permit.released and task.stats()["in_flight"] == 0


# --- many processes --------------------------------------------------------

RATE = 1000.0
BURST = 5


def _hammer(path, start, end):
    task = flowctrl.Table(path).task("shared", local_rate=RATE, burst=BURST)
    while time.monotonic() < start:
        time.sleep(0.001)
    admitted = 0
    while time.monotonic() < end:
        p = task.try_acquire()
        if p is not None:
            p.release()
            admitted += 1
    return admitted


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_workers_share_one_host_rate(tmp_path, method):
    path = str(tmp_path / "t")
    task = flowctrl.Table(path).task("shared", local_rate=RATE, burst=BURST)
    seconds = 2.0
    start = time.monotonic() + (3.0 if method == "spawn" else 0.5)
    ctx = mp.get_context(method)
    with ctx.Pool(4) as pool:
        shares = pool.starmap(_hammer, [(path, start, start + seconds)] * 4)
    expected = RATE * seconds + BURST
    assert all(s > 0 for s in shares), shares
    # Never above the host's rate. Below it only when every worker was off
    # the CPU for longer than the burst lasts (a loaded 2-core machine).
    assert expected * 0.8 <= sum(shares) <= expected * 1.02, (shares, expected)
    assert task.stats()["admitted"] == sum(shares)


def _hold(path, ready):
    task = flowctrl.Table(path).task("db", max_concurrency=10)
    permits = [task.acquire() for _ in range(10)]
    ready.set()
    time.sleep(60)
    del permits


def test_permits_of_a_killed_worker_come_back_within_100ms(tmp_path):
    path = str(tmp_path / "t")
    task = flowctrl.Table(path).task("db", max_concurrency=10)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    worker = ctx.Process(target=_hold, args=(path, ready))
    worker.start()
    assert ready.wait(30)
    assert task.try_acquire() is None
    os.kill(worker.pid, signal.SIGKILL)
    killed = time.monotonic()
    while (p := task.try_acquire(10)) is None:
        assert time.monotonic() - killed < 0.1, "permits not reclaimed in time"
    p.release()
    worker.join()
    assert task.stats()["reclaimed"] == 10


def test_pre_fork_worker_is_its_own_attachment(tmp_path):
    table = flowctrl.Table(tmp_path / "t")
    task = table.task("api", max_concurrency=10)
    parents = task.acquire(2)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a pre-fork worker using the handles it inherited
        code = 0
        try:
            try:
                parents.release()
                code = 2  # a permit must not cross fork
            except flowctrl.InvalidArgumentError:
                pass
            held = task.acquire(8)
            os.write(w, b"1")
            time.sleep(60)
            held.release()
        except BaseException:
            code = 3
        finally:
            os._exit(code)
    assert os.read(r, 1) == b"1"
    rows = {row["pid"]: row for row in task.stats_by_process()}
    assert rows[pid]["in_flight"] == 8
    assert rows[os.getpid()]["in_flight"] == 2
    assert task.check() == {"in_flight": 10, "held": 10, "drift": 0}
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    killed = time.monotonic()
    while (again := task.try_acquire(8)) is None:
        assert time.monotonic() - killed < 0.1
    s = task.stats()
    assert (s["in_flight"], s["held"], s["reclaimed"]) == (10, 10, 8)
    assert table.check() == {"replaced": False, "drift": {}, "unchecked": []}
    again.release()
    parents.release()


def test_a_pooled_table_takes_lanes_on_first_use_and_gives_them_back(tmp_path):
    path = str(tmp_path / "t")
    table = flowctrl.Table(path, capacity=4, max_processes=4, lanes=1)
    assert table.lane_pool() == (0, 1)
    assert flowctrl.Table(tmp_path / "dense").lane_pool() is None
    task = table.task("db", max_concurrency=10)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    worker = ctx.Process(target=_hold, args=(path, ready))
    worker.start()
    assert ready.wait(30)
    assert table.lane_pool() == (1, 1), "the worker took the only set"
    # No set left for this process: a capped acquire is refused and counted.
    assert task.try_acquire() is None
    stats = task.stats()
    assert (stats["unlaned"], stats["unlaned_refused"]) == (1, 1)
    os.kill(worker.pid, signal.SIGKILL)
    worker.join()
    killed = time.monotonic()
    while (p := task.try_acquire(10)) is None:
        assert time.monotonic() - killed < 1.0, "set and permits not back in time"
    p.release()
    stats = task.stats()
    assert stats["reclaimed"] == 10 and stats["admitted"] == 20
    assert table.lane_pool() == (1, 1), "now this process's"


def test_lanes_beyond_every_pair_are_refused(tmp_path):
    with pytest.raises(flowctrl.InvalidArgumentError, match="lanes"):
        flowctrl.Table(tmp_path / "t", capacity=2, max_processes=2, lanes=5)
