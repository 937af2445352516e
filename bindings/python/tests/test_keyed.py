"""Limits per caller from Python: a keyed task's rates, cap, overrides and
shadow mode through every acquire form, the answers a 429 needs, bad keys
refused, and worker processes sharing one key's limits."""

import asyncio
import multiprocessing
import threading
import time

import pytest

import flowctrl


@pytest.fixture
def task(tmp_path):
    table = flowctrl.Table(str(tmp_path / "t"))
    t = table.task("api")
    t.set_keys("5/second;100/hour", max_concurrency=2, capacity=1024)
    yield t
    table.close()


def test_each_key_has_its_rate_and_a_refusal_says_when(task):
    admitted = 0
    for _ in range(8):
        p = task.try_acquire(key="alice")
        if p is not None:
            admitted += 1
            p.release()
    assert admitted == 5
    with pytest.raises(flowctrl.Limited) as refused:
        task.acquire(key="alice")
    assert refused.value.reason == "key_rate"
    assert 0.1 < refused.value.retry_after <= 0.2
    state = task.key_state("alice")
    assert (state["limit"], state["remaining"], state["present"]) == (5, 0, True)
    assert task.try_acquire(key=b"bob") is not None, "bytes keys too, each its own"


def test_the_key_cap_and_a_waiting_acquire(task):
    held = [task.acquire(key="t"), task.acquire(key="t")]
    with pytest.raises(flowctrl.Limited) as refused:
        task.acquire(key="t")
    assert refused.value.reason == "key_concurrency"
    assert task.key_state("t")["in_flight"] == 2
    held.pop().release()
    with task.acquire(key="t", timeout=1.0):
        assert task.key_state("t")["in_flight"] == 2
    # A waiting acquire sleeps out the rate's refusal.
    for p in held:
        p.release()
    for _ in range(3):
        task.acquire(key="w").release()
    began = time.monotonic()
    task.acquire(key="w", timeout=2.0).release()  # within the burst
    task.acquire(key="w", timeout=2.0).release()
    task.acquire(key="w", timeout=2.0).release()  # the sixth waits ~0.2 s
    assert time.monotonic() - began >= 0.15


def test_overrides_and_shadow_mode(task):
    task.set_key_override("vip", "1000/second")
    task.set_key_override("internal", unlimited=True)
    task.set_key_override("abuser", blocked=True)
    assert sum(task.try_acquire(key="vip") is not None for _ in range(50)) == 50
    with pytest.raises(flowctrl.Limited) as refused:
        task.acquire(key="abuser", timeout=0.5)
    assert refused.value.reason == "key_blocked" and refused.value.retry_after is None
    assert task.key_state("vip")["overridden"] is True
    task.remove_key_override("abuser")
    assert task.try_acquire(key="abuser") is not None
    task.set_keys("1/second", shadow=True, capacity=1024)
    assert all(task.try_acquire(key="s") is not None for _ in range(4))
    assert task.key_stats()["shadow_refused"] == 3


def test_asyncio_waits_without_blocking_the_loop(task):
    async def main():
        for _ in range(5):
            (await task.acquire_async(key="a")).release()
        began = time.monotonic()
        async with task.acquire_async(timeout=2.0, key="a"):
            pass
        return time.monotonic() - began

    assert asyncio.run(main()) >= 0.15


def test_bad_keys_and_limits_are_refused(task):
    with pytest.raises(flowctrl.InvalidArgumentError):
        task.try_acquire(key=7)
    with pytest.raises(flowctrl.InvalidArgumentError):
        task.try_acquire(key="x" * 5000)
    with pytest.raises(flowctrl.InvalidArgumentError):
        task.set_keys("10/fortnight")
    with pytest.raises(flowctrl.InvalidArgumentError):
        task.set_key_override("k", unlimited=True, blocked=True)
    # Rates or a cap of an unlimited or blocked key would be ignored:
    # refused, and the key keeps its limits.
    for kind in ("unlimited", "blocked"):
        with pytest.raises(flowctrl.InvalidArgumentError, match="takes no rate"):
            task.set_key_override("k", "10/s", **{kind: True})
        with pytest.raises(flowctrl.InvalidArgumentError, match="takes no rate"):
            task.set_key_override("k", max_concurrency=3, **{kind: True})
    assert task.key_state("k")["overridden"] is False
    with pytest.raises(flowctrl.InvalidArgumentError):
        task.set_keys("1/s", overflow="drop", capacity=1024)


def test_a_timeout_past_what_a_clock_holds_waits_and_never_panics(tmp_path):
    table = flowctrl.Table(str(tmp_path / "t"))
    t = table.task("api", max_concurrency=1)
    t.set_keys("5/s", capacity=1024)
    t.set_key_override("abuser", blocked=True)
    t.acquire(key="k", timeout=1e19).release()
    with pytest.raises(flowctrl.Limited):
        t.acquire(key="abuser", timeout=1e19)
    # The waiting acquires: the one permit comes back after 0.1 s.
    held = t.acquire()
    threading.Timer(0.1, held.release).start()
    t.acquire(timeout=1e19).release()

    async def main():
        held = t.acquire()
        asyncio.get_running_loop().call_later(0.1, held.release)
        (await t.acquire_async(timeout=1e19)).release()

    asyncio.run(main())
    table.close()


def _worker(path, out):
    table = flowctrl.Table(path)
    t = table.task("api")
    n = sum(t.try_acquire(key="shared") is not None for _ in range(200))
    out.put(n)


def test_processes_share_one_keys_limits(tmp_path, task):
    path = str(tmp_path / "t")
    out = multiprocessing.get_context("spawn").Queue()
    procs = [
        multiprocessing.get_context("spawn").Process(target=_worker, args=(path, out))
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    total = sum(out.get(timeout=5) for _ in procs)
    # Burst 5 and 5/s over a few seconds at most: never 3 x 5.
    assert 5 <= total <= 5 + 25, total


def test_a_key_cap_of_0_is_refused_and_none_or_no_cap_means_none(tmp_path):
    table = flowctrl.Table(str(tmp_path / "caps"))
    t = table.task("api")
    with pytest.raises(flowctrl.InvalidArgumentError, match="would admit nothing"):
        t.set_keys("100/second", max_concurrency=0)
    with pytest.raises(flowctrl.InvalidArgumentError, match="would admit nothing"):
        t.set_key_override("alice", "100/second", max_concurrency=0)
    for cap in (None, flowctrl.NO_CAP):
        t.set_keys("100/second", max_concurrency=cap)
        permits = [t.try_acquire(key="alice") for _ in range(5)]
        assert None not in permits, "no cap: all five held at once"
        for p in permits:
            p.release()
    t.set_key_override("alice", max_concurrency=1)
    held = t.acquire(key="alice")
    assert t.try_acquire(key="alice") is None
    held.release()
    table.close()


def _early_in_a_slice(slice_seconds):
    """Sleeps, if needed, until the wall clock's slice (the embedded
    store's) has most of it left."""
    into = time.time() % slice_seconds
    if into > slice_seconds / 2:
        time.sleep(slice_seconds - into + 0.005)


def _admitted(t, key, most=20):
    admitted = 0
    for _ in range(most):
        p = t.try_acquire(key=key)
        if p is None:
            break
        admitted += 1
        p.release()
    return admitted


def test_a_keys_global_rate_is_exact_per_slice_on_a_table_without_a_store(tmp_path):
    # No store: the host is the whole fleet, each key's slice exact on it.
    table = flowctrl.Table(str(tmp_path / "g"))
    t = table.task("api")
    t.set_keys(
        "1000/second",
        capacity=1024,
        key_global="5/s",
        key_global_slice=1.0,
        key_global_local=1,
        key_global_fallback="share",
    )
    _early_in_a_slice(1.0)
    assert _admitted(t, "alice") == 5
    with pytest.raises(flowctrl.Limited) as refused:
        t.acquire(key="alice")
    assert refused.value.reason == "key_global"
    assert 0 < refused.value.retry_after <= 1.0
    assert _admitted(t, b"bob") == 5, "each key has its own slice"
    # An override's own global rate, its slice as text: 2/s in slices of
    # 500 ms is 1 a slice.
    t.set_key_override(
        "vip",
        "1000/second",
        key_global="2/s",
        key_global_slice="500ms",
        key_global_local=0,
        key_global_fallback="deny",
    )
    _early_in_a_slice(0.5)
    assert _admitted(t, "vip") == 1
    with pytest.raises(flowctrl.Limited) as refused:
        t.acquire(key="vip")
    assert refused.value.reason == "key_global" and refused.value.retry_after <= 0.5
    # set_keys sets every key limit: without key_global, the keys have none.
    t.set_keys("1000/second", capacity=1024)
    assert _admitted(t, "alice") == 20
    table.close()


def test_bad_global_rates_are_refused(task):
    for kwargs, says in [
        ({"key_global": "10/fortnight"}, "unknown unit"),
        ({"key_global": "5/s burst 2"}, "key rate"),
        ({"key_global_slice": 1.0}, "needs key_global"),
        ({"key_global_local": 1}, "needs key_global"),
        ({"key_global_fallback": "deny"}, "needs key_global"),
        ({"key_global": "5/s", "key_global_local": 32}, "0 to 31"),
        ({"key_global": "5/s", "key_global_local": -1}, "0 to 31"),
        ({"key_global": "5/s", "key_global_fallback": "rate"}, "share"),
        ({"key_global": "5/s", "key_global_slice": 0.0005}, "whole milliseconds"),
        ({"key_global": "5/s", "key_global_slice": -1}, "whole milliseconds"),
        ({"key_global": "5/s", "key_global_slice": float("nan")}, "whole milliseconds"),
        ({"key_global": "5/s", "key_global_slice": "5ms"}, "between 10 ms and a day"),
        ({"key_global": "5/s", "key_global_slice": "1 fortnight"}, "unknown unit"),
        ({"key_global": "5/s", "key_global_slice": True}, "seconds or text"),
        ({"key_global": "5/s", "key_global_slice": [1]}, "seconds or text"),
        ({"key_global": "1/hour", "key_global_slice": 1}, "permits per slice"),
    ]:
        with pytest.raises(flowctrl.InvalidArgumentError, match=says):
            task.set_keys("5/second", capacity=1024, **kwargs)
        with pytest.raises(flowctrl.InvalidArgumentError, match=says):
            task.set_key_override("k", "5/second", **kwargs)
    with pytest.raises(flowctrl.InvalidArgumentError, match="unlimited or blocked"):
        task.set_key_override("k", blocked=True, key_global="5/s")
    # Nothing changed: the task's 5/second, no global rate.
    assert _admitted(task, "fresh") == 5
