"""Exceptions: where they live, what they derive from, and that they pickle."""

import multiprocessing as mp
import os
import pickle

import pytest

import flowctrl

# Each error's built-in base; FlowctrlError is the base of all of them.
BUILTIN_BASES = {
    "InvalidArgumentError": ValueError,
    "InvalidNameError": ValueError,
    "ConfigMismatchError": ValueError,
    "TableClosedError": ValueError,
    "TablePermissionError": PermissionError,
    "TableIOError": OSError,
    "CorruptTableError": OSError,
    "IncompatibleTableError": OSError,
    "TableFullError": OSError,
    "TooManyProcessesError": OSError,
    "FlowctrlTimeoutError": TimeoutError,
    "StoreError": ConnectionError,
    "InternalError": RuntimeError,
}
ALL = sorted(BUILTIN_BASES) + ["FlowctrlError", "Limited"]


def test_every_exported_exception_is_covered_here():
    exported = {
        name
        for name in flowctrl.__all__
        if isinstance(getattr(flowctrl, name), type)
        and issubclass(getattr(flowctrl, name), BaseException)
    }
    assert exported == set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_exceptions_live_in_flowctrl(name):
    cls = getattr(flowctrl, name)
    assert cls.__module__ == "flowctrl"
    assert cls.__qualname__ == cls.__name__ == name
    assert repr(cls) == f"<class 'flowctrl.{name}'>"


@pytest.mark.parametrize("name, builtin", sorted(BUILTIN_BASES.items()))
def test_each_error_is_a_flowctrl_error_and_the_matching_builtin(name, builtin):
    cls = getattr(flowctrl, name)
    assert issubclass(cls, flowctrl.FlowctrlError)
    assert issubclass(cls, builtin)
    assert str(cls("what went wrong")) == "what went wrong"


def test_limited_is_a_decision_not_an_error():
    assert issubclass(flowctrl.Limited, Exception)
    assert not issubclass(flowctrl.Limited, flowctrl.FlowctrlError)
    assert not issubclass(flowctrl.FlowctrlError, flowctrl.Limited)
    e = flowctrl.Limited('task "x" limited by local', "local")
    assert (str(e), e.reason) == ('task "x" limited by local', "local")


@pytest.mark.parametrize("name", ALL)
def test_exceptions_pickle(name):
    cls = getattr(flowctrl, name)
    made = cls("message", "concurrency") if cls is flowctrl.Limited else cls("message")
    made.extra = 42  # an attribute of its own travels too
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(made, protocol))
        assert type(back) is cls
        assert str(back) == "message" and back.args == made.args
        assert back.extra == 42
        if cls is flowctrl.Limited:
            assert back.reason == "concurrency"


def test_raised_errors_are_caught_as_builtins(tmp_path):
    table = flowctrl.Table(tmp_path / "t", capacity=1)
    task = table.task("svc", burst=2, local_rate=10)
    with pytest.raises(ValueError):
        table.task("")
    with pytest.raises(ValueError):
        task.try_acquire(3)
    with pytest.raises(ValueError):
        table.task("svc", burst=3)
    with pytest.raises(OSError):
        table.task("another")  # the only task slot is taken
    garbage = tmp_path / "garbage"
    garbage.write_bytes(os.urandom(8192))
    with pytest.raises(OSError):
        flowctrl.Table(garbage)
    with pytest.raises(OSError):
        flowctrl.Table(tmp_path / "missing" / "t")
    table.close()
    with pytest.raises(ValueError):
        table.reap()


# --- across a process pool --------------------------------------------------


def _rejected(path):
    """Meets the concurrency the parent holds: raises Limited."""
    flowctrl.Table(path).task("one", max_concurrency=1).acquire()


def _attach(path):
    """Attaches to a table whose one process slot the parent holds."""
    flowctrl.Table(path)


def _describe(fn, path):
    try:
        fn(path)
    except Exception as e:  # noqa: BLE001 - reporting what was raised
        return type(e).__name__, str(e), getattr(e, "reason", None)
    return None


@pytest.mark.timeout(120)
def test_errors_cross_a_process_pool_intact(tmp_path):
    limited = str(tmp_path / "limited")
    held = flowctrl.Table(limited).task("one", max_concurrency=1).acquire()
    full = str(tmp_path / "full")
    parent = flowctrl.Table(full, max_processes=1)
    pool = mp.get_context("spawn").Pool(1)
    workers = list(pool._pool)  # to check their exit status at the end
    try:
        for fn, path, expected in [
            (_rejected, limited, flowctrl.Limited),
            (_attach, full, flowctrl.TooManyProcessesError),
        ]:
            name, message, reason = pool.apply_async(_describe, (fn, path)).get(60)
            assert name == expected.__name__
            with pytest.raises(expected) as e:
                pool.apply_async(fn, (path,)).get(60)
            assert type(e.value) is expected
            assert str(e.value) == message
            assert getattr(e.value, "reason", None) == reason
        assert reason is None and e.value.args == (message,)
        assert isinstance(e.value, OSError)
    finally:
        pool.close()
        pool.join()
    assert [w.exitcode for w in workers] == [0]
    held.release()
    parent.close()


@pytest.mark.parametrize("name", ["}x", "x{", "{app}"])
def test_names_that_break_redis_cluster_hash_tags_are_refused(tmp_path, name):
    table = flowctrl.Table(tmp_path / "table")
    with pytest.raises(flowctrl.InvalidNameError, match="hash tag"):
        table.task(name)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"key_prefix": "app{"}, "key_prefix"),
        ({"key_prefix": "{app}"}, "key_prefix"),
        ({"key_prefix": "a\nb"}, "key_prefix"),
        ({"host_id": "left"}, "host_id"),
        ({"host_id": "h{1}"}, "host_id"),
    ],
)
def test_key_prefixes_and_host_ids_that_break_the_store_are_refused(tmp_path, kwargs, field):
    with pytest.raises(flowctrl.InvalidArgumentError, match=field):
        flowctrl.Table(tmp_path / "table", store="redis://127.0.0.1:1/0", **kwargs)


def test_store_passwords_are_never_in_errors(tmp_path):
    for url in [
        "unix:///tmp/no.sock?pass=secretpw&timeout_ms=0",
        "redis+sentinel://:secret/pw@127.0.0.1:1,127.0.0.1:x/master",
    ]:
        with pytest.raises(flowctrl.InvalidArgumentError) as e:
            flowctrl.Table(tmp_path / "table", store=url)
        assert "secret" not in str(e.value)
