"""A keyed task's record of its keys' global rates and the fleet's hot keys
through the Python face (Store.set_key_record, key_record,
remove_key_record, hot_keys; Task.key_stats()'s record), against a real
redis-server of each test's own."""

import time

import pytest

import flowctrl
from test_quota import open_table, pytestmark, redis  # noqa: F401 (the fixture)

NONE = {"key_global": None, "key_global_slice": None, "key_global_local": None,
        "key_global_fallback": None}
VIP = {"key_global": "60/s", "key_global_slice": "500ms", "key_global_local": 3,
       "key_global_fallback": "deny"}


def keyed_host(tmp_path, url):
    """A host with its own rate for every key: 1000/s across the fleet."""
    task = open_table(tmp_path / "host", url, timeout=1.0).task("api")
    task.set_keys(key_global="1000/second")
    return task


def wait_for(what, within=5.0):
    deadline = time.monotonic() + within
    while not what():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.05)


def admitted(task, key, asks, seconds=0.0):
    """Admissions of `asks` requests for `key`, spread over `seconds`
    from the start of a second of the wall clock (the store's slices): 1.2 s
    then spans two 1 s slices, not three."""
    n = 0
    if seconds:
        time.sleep(1.0 - time.time() % 1.0 + 0.01)
    start = time.monotonic()
    for i in range(asks):
        time.sleep(max(0.0, start + seconds * i / asks - time.monotonic()))
        try:
            task.acquire(key=key).release()
            n += 1
        except flowctrl.Limited:
            pass
    return n


def test_a_key_record_reaches_a_host_and_its_hot_keys_are_listed(tmp_path, redis):
    store = flowctrl.Store(redis.url, timeout=1.0)
    assert store.key_record("api") is None
    task = keyed_host(tmp_path, redis.url)
    stats = task.key_stats()
    assert (stats["record"], stats["record_refused"]) == (0, 0)

    version = store.set_key_record("api", key_global="20/s",
                                   overrides={"vip": VIP, "free": None})
    assert isinstance(version, int) and version > 0
    record = store.key_record("api")
    assert record == {"version": version, "key_global": "20/s", "key_global_slice": "1s",
                      "key_global_local": 1, "key_global_fallback": "share",
                      "overrides": {"free": NONE, "vip": VIP}}
    # What it reads back writes the same record again, under a new version.
    again = store.set_key_record("api", **{k: v for k, v in record.items() if k != "version"})
    assert again > version
    assert store.key_record("api") == dict(record, version=again)

    # The host adopts it within about a second, over its own 1000/s.
    wait_for(lambda: task.key_stats()["record"] == again)
    assert task.key_stats()["record_refused"] == 0
    # 400/s for 1.2 s: at most the record's 20 in each of two slices (and
    # a host's allowance), where the host's own 1000/s admits nearly all.
    assert 1 <= admitted(task, "k", 480, 1.2) <= 45, "the record's 20/s, not 1000/s"

    # A key asked past its limit: the host pulls it, the store lists it.
    def listed():
        admitted(task, "hot", 10)
        hot = store.hot_keys("api", slice_ms=1000, top=100)
        assert hot["slice_ms"] == 1000 and hot["slice"] > 0 and len(hot["top"]) <= hot["keys"]
        return [k for k in hot["top"] if k["name"] == b"hot" and k["given"] >= 1
                and k["asks"] >= 1 and k["id"] > 0]
    wait_for(listed)
    assert len(store.hot_keys("api", top=1)["top"]) == 1

    # Removed once; the host keeps its rates until its own are written again.
    assert store.remove_key_record("api") is True
    assert store.remove_key_record("api") is False
    assert store.key_record("api") is None
    wait_for(lambda: task.key_stats()["record"] == 0)
    assert redis.command("EXISTS", "flowctrl:{api}:k-cfg") == b":0\r\n"


def test_hostile_key_records_are_refused_through_the_python_face(tmp_path, redis):
    store = flowctrl.Store(redis.url, timeout=1.0)
    for bad, says in [
        (dict(key_global="fast"), "fast"),
        (dict(key_global="-1/s"), "positive"),
        (dict(key_global="20/s", key_global_local=32), "key_global_local"),
        (dict(key_global="20/s", key_global_fallback="maybe"), "maybe"),
        (dict(key_global_slice="1s"), "key_global_slice needs key_global"),
        (dict(overrides={"vip": {"key_global": "1/h", "key_global_slice": "1ms"}}), "vip"),
        (dict(overrides={"vip": {"key_global": "20/s", "burst": 3}}), "burst"),
        (dict(overrides={"vip": "60/s"}), "vip"),
        (dict(overrides={f"k{i}": None for i in range(65)}), "64"),
        (dict(overrides={"": None}), "1 to"),
        (dict(overrides={b"\xff": None}), "UTF-8"),
    ]:
        with pytest.raises(flowctrl.InvalidArgumentError, match=says) as e:
            store.set_key_record("api", **bad)
        assert isinstance(e.value, ValueError), bad
    with pytest.raises(TypeError):
        store.set_key_record("api", overrides={"vip": {"key_global": 60}})
    for call in [lambda: store.set_key_record(""), lambda: store.key_record(""),
                 lambda: store.remove_key_record(""), lambda: store.hot_keys("")]:
        with pytest.raises(flowctrl.InvalidNameError):
            call()
    for bad in [dict(top=101), dict(slice_ms=5)]:
        with pytest.raises(flowctrl.InvalidArgumentError, match="hot keys"):
            store.hot_keys("api", **bad)
    assert store.key_record("api") is None, "nothing written"

    # A record written by hand with a bad rate: refused by the reader and
    # by the host, which keeps its own and says which version it refused.
    task = keyed_host(tmp_path, redis.url)
    assert redis.command("HSET", "flowctrl:{api}:k-cfg", "version", "5",
                         "key_global", "10/s") == b":2\r\n"
    with pytest.raises(flowctrl.InvalidArgumentError, match="key_global") as e:
        store.key_record("api")
    assert "10/s" in str(e.value), e.value
    wait_for(lambda: task.key_stats()["record_refused"] == 5)
    assert task.key_stats()["record"] == 0
    assert admitted(task, "k", 480, 1.2) > 90, "its own 1000/s, not a record's"
