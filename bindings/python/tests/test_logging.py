"""flowctrl's log lines reach Python's logging ("flowctrl.store",
"flowctrl.table"): from the calling thread with the GIL held, from a call
that let the GIL go, and from the reaper thread, which never had it, while
the main thread keeps the GIL busy. The store is a closed port: every pull
fails at once. Task names are unique per test: lines are rate-limited per
task and kind (one per 10 s) in this process. A line's fields are the
record's attributes (strings); with no logging set up, warnings reach
stderr (Python's last-resort handler), as the C library's do."""

import logging
import os
import subprocess
import sys
import threading
import time
import uuid

import flowctrl

CLOSED_STORE = "redis://127.0.0.1:1/0"


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def lines(caplog, logger, needle):
    return [r for r in caplog.records if r.name == logger and needle in r.getMessage()]


def test_a_store_failure_is_a_warning_of_flowctrl_store(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="flowctrl")
    name = unique("api")
    with flowctrl.Table(tmp_path / "t", store=CLOSED_STORE) as table:
        task = table.task(name, global_rate=100)
        permit = task.try_acquire()  # the GIL held: admitted by the fallback
        assert permit is not None
        permit.release()
    [line] = lines(caplog, "flowctrl.store", f'task "{name}"')
    assert line.levelno == logging.WARNING
    assert "the quota store failed" in line.getMessage()
    assert CLOSED_STORE in line.getMessage()


def test_a_line_carries_task_pid_host_and_store(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="flowctrl")
    name = unique("fields")
    with flowctrl.Table(tmp_path / "t", store=CLOSED_STORE) as table:
        assert table.task(name, global_rate=100).try_acquire() is not None
    [line] = lines(caplog, "flowctrl.store", f'task "{name}"')
    assert line.task == name
    assert line.pid == str(os.getpid())
    assert len(line.host) == 16  # the default host id
    assert line.store == f"Redis at {CLOSED_STORE}"


UNCONFIGURED = f"""
import sys, flowctrl
with flowctrl.Table(sys.argv[1], store={CLOSED_STORE!r}) as table:
    assert table.task("api", global_rate=100).try_acquire() is not None
"""


def test_without_logging_set_up_warnings_reach_stderr(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", UNCONFIGURED, str(tmp_path / "t")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert 'task "api": the quota store failed' in out.stderr


def test_levels_are_python_s(tmp_path, caplog):
    caplog.set_level(logging.ERROR, logger="flowctrl")
    name = unique("quiet")
    with flowctrl.Table(tmp_path / "t", store=CLOSED_STORE) as table:
        assert table.task(name, global_rate=100).try_acquire() is not None
    assert not lines(caplog, "flowctrl.store", name), "a warning is below ERROR"


def test_a_line_from_a_call_that_let_the_gil_go(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="flowctrl")
    name = unique("waits")
    with flowctrl.Table(tmp_path / "t", store=CLOSED_STORE) as table:
        task = table.task(name, global_rate=100)
        with task.acquire(timeout=1.0):  # waits, and pulls, without the GIL
            pass
    assert lines(caplog, "flowctrl.store", f'task "{name}"')


CHILD = """
import os, sys, flowctrl
table = flowctrl.Table(sys.argv[1])
task = table.task(sys.argv[2], max_concurrency=8)
permit = task.try_acquire(2)
os._exit(0)  # holding 2 permits
"""


def test_a_line_from_the_reaper_thread_while_the_main_thread_holds_the_gil(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="flowctrl")
    name = unique("reaped")
    with flowctrl.Table(tmp_path / "t") as table:
        task = table.task(name, max_concurrency=8)
        subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "t"), name], check=True)
        # Busy in Python, not sleeping: the reaper thread (never a Python
        # thread) must get the GIL from the interpreter's switching.
        deadline = time.monotonic() + 5
        found = []
        while not found and time.monotonic() < deadline:
            found = lines(caplog, "flowctrl.table", f'task "{name}"')
        assert found, "the reaper's line arrived"
        [line] = found
        assert line.levelno == logging.INFO
        assert "gave back 2 permit(s) held by dead process" in line.getMessage()
        assert line.thread != threading.main_thread().ident, "from the reaper thread"
        assert task.stats()["reclaimed"] == 2
