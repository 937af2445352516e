"""The GIL is let go around calls that can wait or scan, and kept around
acquire and release (cheaper than a GIL round trip)."""

import sys
import threading
import time

import pytest

import flowctrl


class GilWatcher:
    """A thread that counts each time it gets the GIL.

    With a switch interval of 100 s the interpreter never takes the GIL from
    a running thread, so while the main thread runs, the count moves only
    when the main thread lets the GIL go itself.
    """

    def __init__(self):
        self.count = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop:
            self.count += 1
            time.sleep(0.0002)  # lets the GIL go, then waits to get it back

    def __enter__(self):
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(100.0)
        self._thread.start()
        while self.count < 2:
            time.sleep(0.001)
        return self

    def __exit__(self, *exc):
        self._stop = True
        self._thread.join(30)
        sys.setswitchinterval(self._interval)
        assert not self._thread.is_alive()

    def others_ran_during(self, op, seconds):
        """Runs `op` over and over for at most `seconds`: did the watcher run?"""
        start = self.count
        deadline = time.monotonic() + seconds
        while self.count - start < 3 and time.monotonic() < deadline:
            op()
        return self.count - start >= 3


@pytest.fixture
def table(tmp_path):
    # Many process slots: a statistics read sums over all of them.
    return flowctrl.Table(tmp_path / "t", capacity=8, max_processes=1024)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "call",
    [
        "open",
        "task",
        "reap",
        "update",
        "stats",
        "stats_by_process",
        "set_keys",
        "set_key_override",
        "remove_key_override",
    ],
)
def test_waiting_and_scanning_calls_let_the_gil_go(table, call):
    task = table.task("api", max_concurrency=4)
    # The key file's config lock can be held by another process for up to
    # 2 s: its writers let the GIL go.
    task.set_keys("5/s", capacity=1024)
    op = {
        "open": lambda: flowctrl.Table(table.path),
        "task": lambda: table.task("api"),
        "reap": table.reap,
        "update": lambda: task.update(max_concurrency=4),
        "stats": task.stats,
        "stats_by_process": task.stats_by_process,
        "set_keys": lambda: task.set_keys("5/s", capacity=1024),
        "set_key_override": lambda: task.set_key_override("k", "1/s"),
        "remove_key_override": lambda: task.remove_key_override("k"),
    }[call]
    with GilWatcher() as watcher:
        assert watcher.others_ran_during(op, seconds=10), f"{call} holds the GIL"


@pytest.mark.timeout(60)
def test_acquire_and_release_keep_the_gil(table):
    """Also shows the watcher can tell: here it must not run at all."""
    task = table.task("api", max_concurrency=4)

    def op():
        task.try_acquire().release()
        with task.acquire():
            pass

    with GilWatcher() as watcher:
        assert not watcher.others_ran_during(op, seconds=0.3)


@pytest.fixture
def silent_store():
    """A store that never answers: a socket that listens and never accepts,
    so every command waits out the store timeout."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    yield f"redis://127.0.0.1:{s.getsockname()[1]}/0"
    s.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call", ["try_acquire", "acquire"])
def test_an_acquire_that_pulls_from_the_store_lets_the_gil_go(tmp_path, silent_store, call):
    table = flowctrl.Table(
        tmp_path / "t", store=silent_store, store_timeout=0.2, store_connect_timeout=0.2
    )
    task = table.task("api", global_rate=1000)
    assert task._may_pull(1)
    op = {
        "try_acquire": lambda: task.try_acquire(),
        "acquire": lambda: task.acquire() if task._may_pull(1) else None,
    }[call]
    with GilWatcher() as watcher:
        assert watcher.others_ran_during(op, seconds=5), f"{call} held the GIL over a pull"


@pytest.mark.timeout(60)
def test_acquire_async_does_not_block_the_loop_on_a_pull(tmp_path, silent_store):
    import asyncio

    table = flowctrl.Table(
        tmp_path / "t", store=silent_store, store_timeout=0.3, store_connect_timeout=0.3
    )
    task = table.task("api", global_rate=1000)

    async def main():
        ticks = 0
        done = False

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0.001)

        t = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.01)
        before = ticks
        began = time.monotonic()
        async with task.acquire_async(timeout=1):
            pass
        took = time.monotonic() - began
        done = True
        await t
        return ticks - before, took

    ticks, took = asyncio.run(main())
    # The pull waited out the store's timeout (the store fails: the fallback
    # admits), and the loop kept ticking meanwhile.
    assert took >= 0.25, took
    assert ticks >= 50, f"the loop ticked {ticks} times in {took:.3f} s"


@pytest.mark.timeout(60)
def test_a_keyed_acquire_async_does_not_block_the_loop_on_the_store(tmp_path, silent_store):
    import asyncio

    table = flowctrl.Table(
        tmp_path / "t", store=silent_store, store_timeout=0.3, store_connect_timeout=0.3
    )
    task = table.task("api")
    task.set_keys(capacity=1024, key_global="1/s", key_global_local=0)
    assert not task._may_pull(1) and task._may_pull_key(1)

    async def main():
        ticks = []
        done = False

        async def ticker():
            while not done:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.001)

        t = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.01)
        slowest = 0.0
        # The table's keeper thread may make a window's call before any
        # request does (it looks every 10 ms): ask often, until one acquire
        # made the call and waited out the store's timeout.
        until = time.monotonic() + 6.0
        while time.monotonic() < until and slowest < 0.25:
            began = time.monotonic()
            try:
                async with task.acquire_async(key="k"):
                    pass
            except flowctrl.Limited:
                await asyncio.sleep(0.001)
            slowest = max(slowest, time.monotonic() - began)
        done = True
        await t
        return slowest, max(b - a for a, b in zip(ticks, ticks[1:]))

    slowest, gap = asyncio.run(main())
    # An acquire waited out the store's timeout, and the loop kept ticking.
    assert slowest >= 0.25, slowest
    assert gap < 0.15, f"the loop stood still for {gap:.3f} s"
