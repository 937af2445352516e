"""FastAPI and Django behind the middleware, with real servers and clients:
FastAPI on uvicorn (recipes/fastapi_app.py) and a Django site on gunicorn
with a 2 s worker timeout (recipes/django_wsgi.py, settings in
recipes/django_settings.py), each set up with the two lines the guide
shows, on a table of their own.

* FastAPI: a task per path prefix (``by_path``), keys by the client's
  address behind one trusted proxy (``client_address(trusted_hops=1)``: a
  forged X-Forwarded-For entry before the proxy's does not change the
  key), and a backend call that times out (asyncio.TimeoutError) released
  as "dropped";
* Django: the task's cap answers 429, a 503 is "dropped", and a request
  gunicorn's worker timeout aborts is released as "dropped" by the worker
  on its way out (not left to the reaper), after which the new worker
  admits again.
"""

import sys
import time
from collections import Counter

import flowctrl
import pytest
from test_middleware import Holder, ask, released, settled_releases
from test_recipes import Server, wait_for


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("frameworks") / "table"
    with flowctrl.Table(path) as table:
        yield table


@pytest.fixture(scope="module")
def fastapi(table, tmp_path_factory):
    api = table.task("fastapi", max_concurrency=64)
    api.set_keys("3/minute", capacity=64)
    search = table.task("fastapi-search", max_concurrency=1)
    search.set_keys("100/minute", capacity=64)
    argv = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--port", "0", "--no-access-log",
            "--no-proxy-headers", "--timeout-graceful-shutdown", "5", "fastapi_app:app"]
    log = tmp_path_factory.mktemp("fastapi") / "uvicorn.log"
    with Server(argv, log, table.path, r"Application startup complete", 1,
                r"Uvicorn running on http://127\.0\.0\.1:(\d+)", r"Started server process \[(\d+)\]") as server:
        yield server, api, search
    for task in (api, search):
        wait_for(lambda: task.stats()["in_flight"] == 0, 5, "no permit held after the stop")


@pytest.fixture(scope="module")
def django(table, tmp_path_factory):
    task = table.task("django", max_concurrency=64)
    argv = [sys.executable, "-m", "gunicorn", "--workers", "1", "--worker-class", "sync",
            "--bind", "127.0.0.1:0", "--timeout", "2", "--graceful-timeout", "5", "django_wsgi:application"]
    log = tmp_path_factory.mktemp("django") / "gunicorn.log"
    with Server(argv, log, table.path, r"Booting worker with pid", 1,
                r"Listening at: http://127\.0\.0\.1:(\d+)", r"Booting worker with pid: (\d+)") as server:
        yield server, task
    wait_for(lambda: task.stats()["in_flight"] == 0, 5, "no permit held after the stop")


def forwarded(address):
    return {"X-Forwarded-For": address}


@pytest.mark.timeout(120)
def test_fastapi_keys_by_the_forwarded_address_and_a_task_per_path(fastapi):
    server, api, search = fastapi
    port = server.port
    answers = [ask(port, "/work", headers=forwarded("203.0.113.7"))[0] for _ in range(3)]
    assert answers == [200, 200, 200]
    # A client cannot pick its key: entries before the proxy's own are its to forge.
    status, headers, _ = ask(port, "/work", headers=forwarded("198.51.100.1, 203.0.113.7"))
    assert status == 429 and headers["ratelimit-limit"] == "3", (status, headers)
    assert ask(port, "/work", headers=forwarded("203.0.113.8"))[0] == 200  # another client
    assert api.key_state("203.0.113.7")["remaining"] == 0
    assert api.key_state("203.0.113.8")["remaining"] == 2
    assert api.key_state("198.51.100.1")["remaining"] == 3  # never charged

    before, searched = settled_releases(api), settled_releases(search)
    holder = Holder(port, 1.5, route="/search")
    wait_for(lambda: search.stats()["in_flight"] == 1, 10, "the search permit held")
    assert ask(port, "/search", headers=forwarded("203.0.113.9"))[0] == 429  # its task's cap of 1
    assert ask(port, "/work", headers=forwarded("203.0.113.9"))[0] == 200
    assert holder.join() == 200
    wait_for(lambda: released(search) - searched == Counter(success=1), 5, "the search release")
    wait_for(lambda: released(api) - before == Counter(success=1), 5, "the work release")


@pytest.mark.timeout(120)
def test_fastapi_a_backend_timeout_is_dropped(fastapi):
    server, api, _ = fastapi
    before = settled_releases(api)
    assert ask(server.port, "/backend", headers=forwarded("203.0.113.20"))[0] == 500
    wait_for(lambda: released(api) - before == Counter(dropped=1), 5, "the timed-out request dropped")


@pytest.mark.timeout(120)
def test_django_cap_failures_and_a_worker_timeout(django):
    server, task = django
    port = server.port
    before = settled_releases(task)
    assert ask(port, "/work?hold=0")[0] == 200
    assert ask(port, "/fail")[0] == 503
    wait_for(lambda: released(task) - before == Counter(success=1, dropped=1), 5, "2 releases")

    task.update(max_concurrency=1)
    try:
        permit = task.acquire()  # the cap of 1 is full
        status, headers, body = ask(port, "/work?hold=0")
        assert (status, headers["retry-after"], body) == (429, "1", b"Too Many Requests\n")
        permit.release()
    finally:
        task.update(max_concurrency=64)

    # A request longer than gunicorn's --timeout 2: the arbiter aborts the
    # worker (SIGABRT: SystemExit(1) in the view), which releases the permit
    # as dropped on its way out.
    before = settled_releases(task)
    reclaimed = task.stats()["reclaimed"]
    workers = server.worker_pids()
    started = time.monotonic()
    holder = Holder(port, 20)
    answer = holder.join()
    assert answer == 500 or isinstance(answer, str), answer  # gunicorn's 500, or the connection cut
    assert time.monotonic() - started < 15
    wait_for(lambda: released(task) - before == Counter(dropped=1), 5, "the aborted request dropped")
    assert task.stats()["reclaimed"] == reclaimed  # released by the worker, not reaped
    assert "WORKER TIMEOUT" in server.log()
    wait_for(lambda: len(server.worker_pids() - workers) >= 1, 15, "a new worker")
    wait_for(lambda: ask(port, "/work?hold=0")[0] == 200, 15, "a 200 from the new worker")
