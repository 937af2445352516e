"""Balancers from Python: pick as a context manager, outcomes, exclusion,
membership, the retry budget, statistics, bad input, and picks shared
across processes."""

import multiprocessing as mp
import os
import signal

import pytest

import flowctrl

BACKENDS = ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]


@pytest.fixture
def table(tmp_path):
    with flowctrl.Table(tmp_path / "table", balancers=4, backends_per_balancer=8) as t:
        yield t


def test_pick_releases_as_success_or_dropped(table):
    lb = table.balancer("api", backends=BACKENDS)
    with lb.pick() as choice:
        assert choice.backend in BACKENDS
        assert lb.stats()[choice.backend]["in_flight"] == 1
    assert choice.released
    assert sum(s["in_flight"] for s in lb.stats().values()) == 0
    assert sum(s["recent_successes"] for s in lb.stats().values()) == 1
    with pytest.raises(ZeroDivisionError):
        with lb.pick(exclude=BACKENDS[:2]) as choice:
            assert choice.backend == BACKENDS[2]
            1 / 0
    stats = lb.stats()[BACKENDS[2]]
    assert stats["recent_failures"] == 1
    assert stats["rtt"] >= 4.0  # the failure's penalty RTT
    # The failed backend is avoided from now on.
    for _ in range(200):
        with lb.pick() as choice:
            assert choice.backend != BACKENDS[2]


def test_release_by_hand_with_rtt_and_load(table):
    lb = table.balancer("api", backends=BACKENDS, weights=[1, 2, 3])
    choice = lb.pick()
    choice.release("success", rtt=0.02, load=0.5)
    with pytest.raises(flowctrl.InvalidArgumentError):
        choice.release()
    stats = lb.stats()[choice.backend]
    assert stats["load"] == 0.5
    assert stats["weight"] == choice.index + 1
    choice = lb.pick()
    choice.release("ignored")
    with pytest.raises(flowctrl.InvalidArgumentError):
        lb.pick().release("maybe")


def test_bad_input_is_a_clear_error(table):
    with pytest.raises(flowctrl.InvalidArgumentError, match="at least one backend"):
        table.balancer("a", backends=[])
    with pytest.raises(flowctrl.InvalidArgumentError, match="twice"):
        table.balancer("b", backends=["x:1", "x:1"])
    with pytest.raises(flowctrl.InvalidNameError):
        table.balancer("c", backends=["x" * 64])
    with pytest.raises(flowctrl.InvalidArgumentError, match="weight"):
        table.balancer("d", backends=["x:1"], weights=[0])
    with pytest.raises(flowctrl.InvalidArgumentError, match="weights for"):
        table.balancer("e", backends=["x:1"], weights=[1, 2])
    with pytest.raises(flowctrl.TableFullError):
        table.balancer("f", backends=[f"h{i}:1" for i in range(9)])
    lb = table.balancer("api", backends=BACKENDS)
    with pytest.raises(flowctrl.InvalidArgumentError, match="excluded"):
        lb.pick(exclude=BACKENDS)
    with pytest.raises(flowctrl.ConfigMismatchError):
        table.balancer("api", backends=BACKENDS, decay=1.0)
    with pytest.raises(flowctrl.InvalidArgumentError):
        table.balancer("g", backends=BACKENDS, decay=-1.0)


def test_membership_and_retry_budget(table):
    lb = table.balancer("api", backends=BACKENDS, retry_min_per_sec=1.0, retry_ratio=0.0)
    held = lb.pick(exclude=BACKENDS[1:])
    assert held.backend == BACKENDS[0]
    lb.set_backends(["10.0.0.9:80"] + BACKENDS[1:])
    stats = lb.stats()
    assert not stats[BACKENDS[0]]["active"]
    assert stats[BACKENDS[0]]["in_flight"] == 1
    assert stats["10.0.0.9:80"]["ramp"] < 0.2  # a newcomer ramps up
    for _ in range(100):
        with lb.pick() as choice:
            assert choice.backend != BACKENDS[0]
    held.release()
    assert lb.stats()[BACKENDS[0]]["in_flight"] == 0
    assert sum(lb.retry_allowed() for _ in range(30)) == 10


def _child_fails(path, ready):
    with flowctrl.Table(path) as t:
        lb = t.balancer("api", backends=BACKENDS)
        lb.pick(exclude=[BACKENDS[0], BACKENDS[2]]).release("dropped")
        held = [lb.pick(exclude=[BACKENDS[1]]) for _ in range(3)]
        ready.set()
        signal.pause()
        del held


def test_processes_share_failures_and_dead_picks_come_back(tmp_path):
    path = tmp_path / "table"
    with flowctrl.Table(path) as t:
        lb = t.balancer("api", backends=BACKENDS)
        ctx = mp.get_context("fork")
        ready = ctx.Event()
        child = ctx.Process(target=_child_fails, args=(path, ready))
        child.start()
        assert ready.wait(30)
        stats = lb.stats()
        assert stats[BACKENDS[0]]["in_flight"] + stats[BACKENDS[2]]["in_flight"] == 3
        # The child's failure steers this process at once.
        for _ in range(300):
            with lb.pick() as choice:
                assert choice.backend != BACKENDS[1]
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        t.reap()
        assert all(s["in_flight"] == 0 for s in lb.stats().values())


def test_outcome_counters_are_the_metrics_counters(table):
    """successes, failures and ejections_total count since the backend
    joined, as flowctrl_backend_*_total does; ejections is the run."""
    lb = table.balancer("api", backends=BACKENDS)
    first, second = BACKENDS[0], BACKENDS[1]
    for _ in range(3):
        lb.pick(exclude=BACKENDS[1:]).release("success")
    # Five failures in a row eject the second backend once.
    for _ in range(5):
        lb.pick(exclude=[first, BACKENDS[2]]).release("dropped")
    lb.pick(exclude=BACKENDS[1:]).release("ignored")
    stats = lb.stats()
    assert (stats[first]["successes"], stats[first]["failures"]) == (3, 0)
    assert (stats[second]["successes"], stats[second]["failures"]) == (0, 5)
    assert stats[second]["ejections_total"] == 1
    assert stats[second]["ejections"] == 1
    assert stats[first]["ejections_total"] == 0
    # The dict has exactly the keys its TypedDict declares.
    assert set(stats[first]) == set(flowctrl.BackendStats.__annotations__)
