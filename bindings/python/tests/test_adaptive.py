"""Adaptive limits and waiting acquires through the Python binding."""

import asyncio
import multiprocessing as mp
import threading
import time

import pytest

import flowctrl

ALGORITHMS = ["fixed", "aimd", "vegas", "gradient", "gradient2", "auto"]


@pytest.fixture
def table(tmp_path):
    return flowctrl.Table(tmp_path / "t", capacity=16, max_processes=16)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_is_configured_by_name(table, algorithm):
    if algorithm == "fixed":
        task = table.task("svc", limiter="fixed", max_concurrency=5)
        assert task.limit == 5
    else:
        task = table.task("svc", limiter=algorithm, min_limit=2, max_limit=9, initial_limit=4)
        assert task.limit == 4
        s = task.settings
        assert s["limiter"].startswith(algorithm + " window=100")
        assert (s["min_limit"], s["max_limit"], s["initial_limit"]) == (2, 9, 4)
    with task.acquire() as p:
        assert task.stats()["in_flight"] == 1
    p2 = task.acquire()
    p2.release("success", rtt=0.25)
    stats = task.stats()
    assert stats["released_success"] == 2
    assert stats["rtt_sum_ns"] >= 250_000_000
    assert stats["limit"] == task.limit
    # The registered configuration: another limiter is a mismatch.
    other = "vegas" if algorithm != "vegas" else "auto"
    with pytest.raises(flowctrl.ConfigMismatchError, match="limiter"):
        table.task("svc", limiter=other)


def test_update_changes_the_limiter_for_the_host(table):
    task = table.task("svc", limiter="auto")
    assert task.settings["max_limit"] == 1000
    task.update(limiter="gradient2 tolerance=2")
    s = table.task("svc").settings
    assert "tolerance=2" in s["limiter"]
    assert (s["min_limit"], s["max_limit"]) == (20, 200)
    assert task.limit == 20
    task.update(limiter="fixed", max_concurrency=3)
    assert task.limit == 3
    task.update(max_concurrency=NO_CAP)
    assert task.limit is None


NO_CAP = flowctrl.NO_CAP


def test_no_cap_is_the_cores():
    # FC_NO_CAP in C, flowctrl::NO_CAP in Rust.
    assert NO_CAP == 0xFFFF_FFFE


def test_a_cap_of_0_is_refused_and_no_cap_removes_it(table):
    with pytest.raises(flowctrl.InvalidArgumentError, match="max_concurrency 0 is refused"):
        table.task("zero", max_concurrency=0)
    task = table.task("svc", max_concurrency=4)
    with pytest.raises(flowctrl.InvalidArgumentError, match="to remove the cap"):
        task.update(max_concurrency=0)
    assert task.limit == 4, "a refused update changes nothing"
    task.update(max_concurrency=NO_CAP)
    assert task.limit is None
    assert task.settings["max_concurrency"] == 0, "no cap in force reads 0"
    # Registering with no cap matches the uncapped task.
    assert table.task("svc", max_concurrency=NO_CAP).limit is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limiter": "bbr"},
        {"limiter": "auto speed=2"},
        {"limiter": "vegas alpha=nan"},
        {"limiter": "aimd backoff=-1"},
        {"limiter": "gradient2 window=0"},
        {"limiter": "auto tolerance=1"},
        {"limiter": "auto tolerance=9"},
        {"limiter": "aimd tolerance=1.5"},
        {"limiter": "auto", "min_limit": 9, "max_limit": 3},
        {"limiter": "auto", "initial_limit": 5000},
    ],
)
def test_bad_limiters_are_refused(table, kwargs):
    with pytest.raises(flowctrl.InvalidArgumentError):
        table.task("svc", **kwargs)
    task = table.task("ok", limiter="auto")
    with pytest.raises(flowctrl.InvalidArgumentError):
        task.update(**kwargs)
    assert task.settings["limiter"].startswith("auto")


def test_bad_waits_and_rtts_are_refused(table):
    task = table.task("svc", limiter="auto")
    for bad in [-1.0, float("nan"), float("inf")]:
        with pytest.raises(flowctrl.InvalidArgumentError):
            task.acquire(timeout=bad)
        with pytest.raises(flowctrl.InvalidArgumentError):
            task.acquire_async(timeout=bad)
        p = task.acquire()
        with pytest.raises(flowctrl.InvalidArgumentError):
            p.release(rtt=bad)
        p.release()
    assert task.stats()["in_flight"] == 0


def test_a_waiting_acquire_lets_the_gil_go_and_is_woken_by_a_release(table):
    task = table.task("svc", limiter="auto", min_limit=1, max_limit=1, initial_limit=1)
    held = task.acquire()
    ticks = []

    def ticker():
        for _ in range(20):
            ticks.append(time.monotonic())
            time.sleep(0.005)
        held.release()

    t = threading.Thread(target=ticker)
    began = time.monotonic()
    t.start()
    with task.acquire(timeout=10):
        waited = time.monotonic() - began
    t.join()
    assert len(ticks) == 20
    assert 0.08 < waited < 5, waited
    with pytest.raises(flowctrl.Limited) as e:
        with task.acquire():
            task.acquire(timeout=0.05)
    assert e.value.reason == "concurrency"


def test_acquire_async_does_not_block_the_loop(table):
    task = table.task("svc", limiter="auto", min_limit=1, max_limit=1, initial_limit=1)
    held = task.acquire()

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            for _ in range(10):
                ticks += 1
                await asyncio.sleep(0.01)
            held.release()

        tick = asyncio.ensure_future(ticker())
        async with task.acquire_async(timeout=10) as p:
            assert ticks == 10
            assert task.stats()["in_flight"] == 1
        assert p.released
        await tick
        with pytest.raises(flowctrl.Limited):
            async with task.acquire_async(timeout=0.05):
                async with task.acquire_async(timeout=0.05):
                    pass
        permit = await task.acquire_async()
        permit.release()

    asyncio.run(main())
    assert task.stats()["in_flight"] == 0


def _worker(path, start, end, out):
    task = flowctrl.Table(path).task("shared")
    while time.monotonic() < start:
        time.sleep(0.001)
    got = over = 0
    while time.monotonic() < end:
        try:
            with task.acquire(timeout=0.5):
                if task.stats()["in_flight"] > 3:
                    over += 1
                time.sleep(0.002)
                got += 1
        except flowctrl.Limited:
            pass
    out.put((got, over))


def test_four_processes_wait_fairly_under_one_limit(tmp_path):
    path = str(tmp_path / "t")
    task = flowctrl.Table(path).task(
        "shared", limiter="auto", min_limit=3, max_limit=3, initial_limit=3
    )
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    start = time.monotonic() + 0.5
    workers = [
        ctx.Process(target=_worker, args=(path, start, start + 2.0, out)) for _ in range(4)
    ]
    for w in workers:
        w.start()
    results = [out.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(30)
    shares = [g for g, _ in results]
    assert all(o == 0 for _, o in results), results
    mean = sum(shares) / 4
    assert mean > 50, shares
    assert all(abs(s / mean - 1) <= 0.25 for s in shares), shares
    assert task.stats()["in_flight"] == 0


def _until(done, timeout=10.0):
    end = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < end
        time.sleep(0.001)


def test_async_waiters_are_served_in_the_order_they_came(table):
    task = table.task("svc", max_concurrency=1)
    assert task.settings["wait_order"] == "fifo" and task.settings["barging"] is False
    held = task.acquire()
    order = []

    async def waiter(i):
        async with task.acquire_async(timeout=30):
            order.append(i)
            await asyncio.sleep(0.002)

    async def main():
        coros = []
        for i in range(6):
            coros.append(asyncio.ensure_future(waiter(i)))
            while task.stats()["waiting"] != i + 1:
                await asyncio.sleep(0.001)
        held.release()
        await asyncio.gather(*coros)

    asyncio.run(main())
    assert order == list(range(6))
    assert task.stats()["in_flight"] == 0


def test_lifo_serves_the_newest_waiter_first(table):
    task = table.task("svc", max_concurrency=1, wait_order="lifo")
    assert task.settings["wait_order"] == "lifo"
    held = task.acquire()
    order = []

    def waiter(i):
        with task.acquire(timeout=30):
            order.append(i)
            time.sleep(0.002)

    threads = []
    for i in range(5):
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        _until(lambda: task.stats()["waiting"] == i + 1)
    held.release()
    for t in threads:
        t.join()
    assert order == [4, 3, 2, 1, 0]
    with pytest.raises(flowctrl.InvalidArgumentError):
        table.task("other", wait_order="random")


def test_a_cancelled_waiter_leaves_the_queue_and_never_keeps_a_permit(table):
    task = table.task("svc", max_concurrency=1)
    held = task.acquire()

    async def main():
        # Cancelled while it waits: it leaves the line.
        waiting = asyncio.ensure_future(task.acquire_async(timeout=30).__aenter__())
        while task.stats()["waiting"] != 1:
            await asyncio.sleep(0.001)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert task.stats()["waiting"] == 0
        # Handed the permit while the loop is busy, cancelled before it
        # runs again: the permit goes back.
        waiting = asyncio.ensure_future(task.acquire_async(timeout=30).__aenter__())
        while task.stats()["waiting"] != 1:
            await asyncio.sleep(0.001)
        held.release()
        _until(lambda: task.stats()["waiting"] == 0)  # blocks the loop: handed over
        assert task.stats()["in_flight"] == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())
    assert task.stats()["in_flight"] == 0
    task.acquire().release()
