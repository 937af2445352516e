"""flowctrl.asgi and flowctrl.wsgi's RateLimitMiddleware, run for real:
uvicorn with 2 workers serving a Starlette app (recipes/middleware_asgi.py)
and gunicorn with 2 sync workers serving a Flask app
(recipes/middleware_wsgi.py), on free loopback ports, all on one table
file, asked by real HTTP clients (http.client, in threads).

Each server gets a task of its own in that table: a cap for the task
(changed live by the tests) and a key rate of 5/minute. The checks:

* a burst of many keys at once admits exactly each key's 5, and every 429
  carries the real wait (Retry-After >= 11 for a 5/minute key's 6th
  request, what the library's key_state says) and the RateLimit-* headers;
* a permit is held for the whole response (a streamed body keeps it until
  its last chunk) and a request without a key meets the task's own cap;
* a key's own cap and a blocked key;
* releases: "success" for a 200, "dropped" for a 503 and an exception,
  "ignored" for a client that disconnects mid-body;
* a worker SIGKILLed holding permits: the table's in-flight count and its
  check come back to 0, the key's too;
* a task per route: /search takes the permits of a task of its own (a
  Starlette route's own middleware; Flask through ``by_path``), its cap
  full while the other routes' task admits;
* a request its service's deadline cuts off (an ``asyncio.wait_for``
  outside the ASGI middleware) is released as "dropped", one whose client
  left first as "ignored".

A few in-process calls (no server) cover what a real server cannot reach
cheaply: a refusal by the task's rate, the flag that turns admission
headers off.
"""

import asyncio
import http.client
import math
import os
import queue
import signal
import socket
import struct
import sys
import threading
import time
from collections import Counter, defaultdict

import flowctrl
import pytest
from flowctrl import asgi, wsgi
from test_recipes import Server, get, wait_for

KEY_RATE = "5/minute"
OPEN_CAP = 64  # the task's cap while the keys are what is tested


def start_uvicorn(tmp_path, table_path):
    argv = [sys.executable, "-m", "uvicorn", "--workers", "2", "--host", "127.0.0.1", "--port", "0",
            "--no-access-log", "--timeout-graceful-shutdown", "5", "middleware_asgi:app"]
    return Server(argv, tmp_path / "uvicorn.log", table_path, r"Application startup complete", 2,
                  r"Uvicorn running on http://127\.0\.0\.1:(\d+)", r"Started server process \[(\d+)\]")


def start_gunicorn(tmp_path, table_path):
    argv = [sys.executable, "-m", "gunicorn", "--workers", "2", "--worker-class", "sync",
            "--bind", "127.0.0.1:0", "--timeout", "60", "--graceful-timeout", "5", "middleware_wsgi:app"]
    return Server(argv, tmp_path / "gunicorn.log", table_path, r"Booting worker with pid", 2,
                  r"Listening at: http://127\.0\.0\.1:(\d+)", r"Booting worker with pid: (\d+)")


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("middleware") / "table"
    with flowctrl.Table(path) as table:
        yield table


class Served:
    def __init__(self, name, server, task, search):
        self.name, self.server, self.task, self.search = name, server, task, search

    @property
    def port(self):
        return self.server.port


@pytest.fixture(scope="module", params=["uvicorn", "gunicorn"])
def served(request, table, tmp_path_factory):
    name = request.param
    task = table.task(name, max_concurrency=OPEN_CAP)
    task.set_keys(KEY_RATE, capacity=1024)
    search = table.task(f"{name}-search", max_concurrency=OPEN_CAP)
    tmp_path = tmp_path_factory.mktemp(name)
    start = {"uvicorn": start_uvicorn, "gunicorn": start_gunicorn}[name]
    os.environ["MW_TASK"] = name  # read by the app; Server passes os.environ on
    try:
        server = start(tmp_path, table.path)
    finally:
        del os.environ["MW_TASK"]
    with server:
        yield Served(name, server, task, search)
    # Stopped by pid: nothing stays held or attached but us.
    for t in (task, search):
        wait_for(lambda: t.stats()["in_flight"] == 0, 5, "no permit held after the stop")
        assert t.check()["drift"] == 0


def ask(port, path, key=None, timeout=15.0, headers=None):
    """(status, headers with lower-case names, body) of one GET."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        sent = dict(headers or {})
        if key is not None:
            sent["X-API-Key"] = key
        conn.request("GET", path, headers=sent)
        response = conn.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        conn.close()


def burst(port, jobs, threads):
    """Every (key, path) of ``jobs`` asked once, by ``threads`` clients at once."""
    todo = queue.Queue()
    for job in jobs:
        todo.put(job)
    answers, errors = [], []
    start = threading.Barrier(threads)

    def client():
        start.wait()
        while True:
            try:
                key, path = todo.get_nowait()
            except queue.Empty:
                return
            try:
                answers.append((key, *ask(port, path, key)))
            except OSError as e:
                errors.append(repr(e))

    pool = [threading.Thread(target=client) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
    assert errors == [], errors[:5]
    return answers


class Holder:
    """A request that holds its permit on the server for ``hold`` seconds."""

    def __init__(self, port, hold, key=None, route="/work"):
        self.answer = None
        self.thread = threading.Thread(target=self._run, args=(port, hold, key, route))
        self.thread.start()

    def _run(self, port, hold, key, route):
        try:
            self.answer = ask(port, f"{route}?hold={hold}", key, timeout=hold + 15)[0]
        except OSError as e:
            self.answer = type(e).__name__

    def join(self):
        self.thread.join(40)
        assert not self.thread.is_alive()
        return self.answer


def released(task):
    s = task.stats()
    return Counter(success=s["released_success"], dropped=s["released_dropped"],
                   ignored=s["released_ignored"])


def settled_releases(task):
    """The release counts once the server is quiet: a server releases a
    request's permit after its answer has gone, so the last test's releases
    may still be landing when the next test starts counting."""
    wait_for(lambda: task.stats()["in_flight"] == 0, 5, "nothing in flight")
    while True:
        first = released(task)
        time.sleep(0.1)
        if released(task) == first:
            return first


@pytest.mark.timeout(120)
def test_a_burst_admits_exactly_each_keys_rate_and_429s_carry_the_real_wait(served):
    task = served.task
    keys = [f"burst-{served.name}-{i}" for i in range(6)]
    before = task.stats()
    refused_before = task.key_stats()["refused_rate"]
    started = time.monotonic()
    answers = burst(served.port, [(k, "/work?hold=0") for k in keys for _ in range(12)], threads=16)
    took = time.monotonic() - started
    states = {k: (task.key_state(k), time.monotonic() - started) for k in keys}
    by_key = defaultdict(Counter)
    for key, status, headers, _ in answers:
        by_key[key][status] += 1
    assert {k: dict(c) for k, c in by_key.items()} == {k: {200: 5, 429: 7} for k in keys}, by_key
    # A permit is released just after its last chunk is handed to the
    # server: the client may read the answer a moment before.
    wait_for(lambda: task.stats()["released_success"] - before["released_success"] == 5 * len(keys),
             5, "every admitted request released")
    after = task.stats()
    assert after["admitted"] - before["admitted"] == 5 * len(keys)
    assert task.key_stats()["refused_rate"] - refused_before == 7 * len(keys)

    waits = []
    for key, status, headers, _ in answers:
        assert headers["ratelimit-limit"] == "5", headers
        if status == 200:
            assert 0 <= int(headers["ratelimit-remaining"]) <= 4, headers
            assert "retry-after" not in headers
            continue
        wait = int(headers["retry-after"])
        waits.append(wait)
        # The real wait: 60 s / 5 after the key's 5th admission, less the
        # burst's time. The library's own figure, read `since` seconds after
        # the burst began, is at most that much below the wait when the 429
        # was answered.
        assert wait >= 11, (wait, took)
        state, since = states[key]
        assert math.ceil(state["retry_after"]) <= wait <= math.ceil(state["retry_after"] + since), (
            wait, state, since)
        assert headers["ratelimit-remaining"] == "0", headers
        assert 55 <= int(headers["ratelimit-reset"]) <= 60, headers
    print(f"\n{served.name}: {len(answers)} requests in {took:.2f} s, Retry-After {sorted(set(waits))}")


@pytest.mark.timeout(120)
def test_the_permit_is_held_for_the_whole_response_and_keyless_requests_meet_the_task_cap(served):
    task, port = served.task, served.port
    task.update(max_concurrency=1)
    try:
        before = settled_releases(task)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        conn.request("GET", "/stream?chunks=20&every=0.05")
        response = conn.getresponse()
        assert response.status == 200
        first = response.read1(64)
        assert first.startswith(b"chunk 0")
        # Mid-body: the permit is still held, and the cap of 1 is full.
        assert task.stats()["in_flight"] == 1
        status, headers, _ = ask(port, "/work?hold=0")
        assert status == 429, (status, headers)
        assert headers["retry-after"] == "1"  # a cap: no wait is known, the default says 1
        assert not any(h.startswith("ratelimit-") for h in headers)  # no key, no quota to tell
        rest = response.read()
        conn.close()
        assert (first + rest).count(b"chunk") == 20
        wait_for(lambda: task.stats()["in_flight"] == 0, 5, "the release after the last chunk")
        wait_for(lambda: released(task) - before == Counter(success=1), 5, "one success")
        assert ask(port, "/work?hold=0")[0] == 200
    finally:
        task.update(max_concurrency=OPEN_CAP)


@pytest.mark.timeout(120)
def test_a_keys_own_cap_and_a_blocked_key(served):
    task, port = served.task, served.port
    solo, banned = f"solo-{served.name}", f"banned-{served.name}"
    task.set_key_override(solo, "100/hour", max_concurrency=1)
    task.set_key_override(banned, blocked=True)
    holder = Holder(port, 1.5, key=solo)
    wait_for(lambda: task.key_state(solo)["in_flight"] == 1, 10, "the key's permit held")
    status, headers, _ = ask(port, "/work?hold=0", solo)
    assert status == 429 and headers["retry-after"] == "1", (status, headers)
    assert headers["ratelimit-limit"] == "100" and int(headers["ratelimit-remaining"]) == 99, headers
    other = ask(port, "/work?hold=0", f"other-{served.name}")
    assert other[0] == 200, other  # another key is not held back
    assert holder.join() == 200
    wait_for(lambda: task.key_state(solo)["in_flight"] == 0, 5, "the key's permit back")
    status, headers, body = ask(port, "/work?hold=0", banned)
    assert (status, body) == (403, b"Forbidden\n") and "retry-after" not in headers, headers
    assert ask(port, "/work?hold=0", solo)[0] == 200


@pytest.mark.timeout(120)
def test_releases_say_how_each_request_ended(served):
    task, port = served.task, served.port
    before = settled_releases(task)
    assert ask(port, "/work?hold=0")[0] == 200
    assert ask(port, "/fail")[0] == 503
    assert ask(port, "/raise")[0] == 500
    wait_for(lambda: released(task) - before == Counter(success=1, dropped=2), 5, "3 releases")

    # A client that goes away mid-body: reset by SO_LINGER 0 after the first chunk.
    client = socket.create_connection(("127.0.0.1", port), timeout=15)
    client.sendall(b"GET /stream?chunks=100&every=0.02 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b"chunk 0" in client.recv(4096) or b"chunk 0" in client.recv(4096)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    wait_for(lambda: released(task) - before == Counter(success=1, dropped=2, ignored=1), 5,
             "the disconnected request released as ignored")
    wait_for(lambda: task.stats()["in_flight"] == 0, 5, "nothing held")


@pytest.mark.timeout(120)
def test_permits_come_back_when_a_worker_is_sigkilled_mid_request(served):
    task, port = served.task, served.port
    held_key = f"held-{served.name}"
    task.set_key_override(held_key, KEY_RATE, max_concurrency=5)  # a key's in-flight count needs a cap
    before = task.stats()
    holders = [Holder(port, 20, key=held_key), Holder(port, 20)]
    wait_for(lambda: task.stats()["in_flight"] == 2, 15, "2 permits held")
    assert task.key_state(held_key)["in_flight"] == 1
    victims = {r["pid"] for r in task.stats_by_process() if r["in_flight"]}
    assert victims and victims <= served.server.worker_pids(), victims
    for victim in victims:
        os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: task.stats()["in_flight"] == 0, 2, "the reaper")
    took_ms = (time.monotonic() - killed) * 1000
    assert task.check() == {"in_flight": 0, "held": 0, "drift": 0}
    assert task.key_state(held_key)["in_flight"] == 0
    assert task.stats()["reclaimed"] - before["reclaimed"] == 2
    assert all(isinstance(h.join(), str) for h in holders)  # connections cut, no answer
    print(f"\n{served.name}: {len(victims)} worker(s) killed holding 2 permits, back in {took_ms:.1f} ms")
    # The server replaces the worker and admits again.
    wait_for(lambda: get(port, "/work?hold=0")[0] == 200, 15, "a 200 after the kill")


@pytest.mark.timeout(120)
def test_a_route_takes_the_permits_of_its_own_task(served):
    task, search, port = served.task, served.search, served.port
    search.update(max_concurrency=1)
    try:
        before, searched = settled_releases(task), settled_releases(search)
        holder = Holder(port, 1.5, route="/search")
        wait_for(lambda: search.stats()["in_flight"] == 1, 10, "the search permit held")
        assert task.stats()["in_flight"] == 0  # not the app's task
        status, headers, _ = ask(port, "/search?hold=0")
        assert status == 429 and headers["retry-after"] == "1", (status, headers)
        assert ask(port, "/work?hold=0")[0] == 200  # the other routes' task admits
        assert holder.join() == 200
        wait_for(lambda: released(search) - searched == Counter(success=1), 5, "the search release")
        wait_for(lambda: released(task) - before == Counter(success=1), 5, "the work release")
        assert search.stats()["limited_concurrency"] >= 1
    finally:
        search.update(max_concurrency=OPEN_CAP)


@pytest.mark.timeout(120)
def test_a_request_cut_off_by_its_deadline_is_dropped_and_one_left_by_its_client_ignored(served):
    if served.name != "uvicorn":
        pytest.skip("a WSGI worker's timeout: test_frameworks.py (Django on gunicorn --timeout)")
    task, port = served.task, served.port
    before = settled_releases(task)
    started = time.monotonic()
    status, _, body = ask(port, "/work?hold=10", headers={"X-Deadline": "0.3"})
    assert (status, body) == (504, b"deadline passed\n")
    assert time.monotonic() - started < 5
    wait_for(lambda: released(task) - before == Counter(dropped=1), 5, "the cut-off request dropped")

    # The client leaves first, then the deadline passes: the client went away.
    client = socket.create_connection(("127.0.0.1", port), timeout=15)
    client.sendall(b"GET /stream?chunks=100&every=0.02 HTTP/1.1\r\nHost: x\r\nX-Deadline: 1\r\n\r\n")
    assert b"chunk 0" in client.recv(4096) or b"chunk 0" in client.recv(4096)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    wait_for(lambda: released(task) - before == Counter(dropped=1, ignored=1), 5,
             "the abandoned request ignored")
    wait_for(lambda: task.stats()["in_flight"] == 0, 5, "nothing held")


# In-process: what a real server cannot reach cheaply.


def call_wsgi(app, environ):
    seen = {}

    def start_response(status, headers, exc_info=None):
        seen["status"], seen["headers"] = status, dict(headers)
        return lambda data: None

    body = app(environ, start_response)
    try:
        data = b"".join(body)
    finally:
        getattr(body, "close", lambda: None)()
    return seen["status"], seen["headers"], data


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello\n"]


def test_a_refusal_by_the_tasks_rate_carries_its_wait(tmp_path):
    with flowctrl.Table(tmp_path / "t") as table:
        task = table.task("slow", local_rate=0.1, burst=1)  # one per 10 s
        app = wsgi.RateLimitMiddleware(hello, task=task)
        assert call_wsgi(app, {})[0] == "200 OK"
        status, headers, body = call_wsgi(app, {})
        assert status == "429 Too Many Requests" and body == b"Too Many Requests\n"
        assert 9 <= int(headers["Retry-After"]) <= 10, headers
        assert task.stats()["released_success"] == 1


def test_admission_headers_can_be_turned_off_and_an_unknown_wait_left_out(tmp_path):
    with flowctrl.Table(tmp_path / "t") as table:
        task = table.task("keyed", max_concurrency=1)
        task.set_keys("3/minute")
        key = wsgi.header("X-API-Key")
        on = wsgi.RateLimitMiddleware(hello, task=task, key=key)
        off = wsgi.RateLimitMiddleware(hello, task=task, key=key, rate_limit_headers=False,
                                       unknown_retry_after=None)
        _, headers, _ = call_wsgi(on, {"HTTP_X_API_KEY": "a"})
        assert (headers["RateLimit-Limit"], headers["RateLimit-Remaining"]) == ("3", "2")
        _, headers, _ = call_wsgi(off, {"HTTP_X_API_KEY": "a"})
        assert not any(h.startswith("RateLimit") for h in headers)
        permit = task.acquire()  # the task's cap is full: no wait is known
        status, headers, _ = call_wsgi(off, {})
        assert status.startswith("429") and "Retry-After" not in headers
        permit.release()


def test_a_refusal_by_a_keys_global_rate_carries_its_wait_and_no_rate_numbers(tmp_path):
    # 1 a day across the fleet (no store: this host is the fleet), 100 a
    # minute on the host: the second request is refused by the global rate,
    # and the host's numbers (99 remaining) would say otherwise.
    with flowctrl.Table(tmp_path / "t") as table:
        task = table.task("keyed")
        task.set_keys("100/minute", key_global="1/day")
        app = wsgi.RateLimitMiddleware(hello, task=task, key=wsgi.header("X-API-Key"))
        status, headers, _ = call_wsgi(app, {"HTTP_X_API_KEY": "a"})
        assert status.startswith("200") and headers["RateLimit-Remaining"] == "99"
        status, headers, _ = call_wsgi(app, {"HTTP_X_API_KEY": "a"})
        assert status == "429 Too Many Requests", status
        assert 1 <= int(headers["Retry-After"]) <= 86400, headers
        assert not any(h.startswith("RateLimit") for h in headers), headers


def test_asgi_releases_dropped_when_the_app_raises_before_answering(tmp_path):
    async def broken(scope, receive, send):
        raise ValueError("no answer")

    async def run(app):
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        with pytest.raises(ValueError):
            await app({"type": "http", "headers": []}, receive, send)
        return sent

    with flowctrl.Table(tmp_path / "t") as table:
        task = table.task("api", max_concurrency=2)
        assert asyncio.run(run(asgi.RateLimitMiddleware(broken, task=task))) == []
        stats = task.stats()
        assert (stats["released_dropped"], stats["in_flight"]) == (1, 0)


def call_asgi(app, scope):
    """Runs ``app`` on one request of ``scope``: (status, [messages sent])."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app({"type": "http", "headers": [], "path": "/", **scope}, receive, send))
    return sent[0]["status"] if sent else None, sent


async def ok_asgi(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok\n"})


def test_asgi_a_cancelled_request_is_dropped_unless_its_client_left_first(tmp_path):
    async def run(app, disconnect):
        messages = [{"type": "http.request", "body": b"", "more_body": False}]
        if disconnect:
            messages.append({"type": "http.disconnect"})

        async def receive():
            if messages:
                return messages.pop(0)
            await asyncio.sleep(3600)

        async def send(message):
            pass

        serving = asyncio.ensure_future(app({"type": "http", "headers": [], "path": "/"}, receive, send))
        await asyncio.sleep(0.05)
        serving.cancel()  # what asyncio.wait_for / asyncio.timeout around it do at the deadline
        with pytest.raises(asyncio.CancelledError):
            await serving

    async def slow(scope, receive, send):
        while (await receive())["type"] != "http.disconnect":
            pass
        await asyncio.sleep(3600)  # the client left; the handler carries on

    async def stuck(scope, receive, send):
        await receive()
        await asyncio.sleep(3600)

    with flowctrl.Table(tmp_path / "t") as table:
        task = table.task("api", max_concurrency=2)
        app = asgi.RateLimitMiddleware(stuck, task=task)
        asyncio.run(run(app, disconnect=False))
        assert (task.stats()["released_dropped"], task.stats()["released_ignored"]) == (1, 0)
        asyncio.run(run(asgi.RateLimitMiddleware(slow, task=task), disconnect=True))
        assert (task.stats()["released_dropped"], task.stats()["released_ignored"]) == (1, 1)

        async def times_out(scope, receive, send):
            await asyncio.wait_for(asyncio.sleep(3600), 0.01)  # a backend's own timeout

        with pytest.raises(asyncio.TimeoutError):
            call_asgi(asgi.RateLimitMiddleware(times_out, task=task), {})
        assert task.stats()["released_dropped"] == 2
        assert task.stats()["in_flight"] == 0


def test_wsgi_a_worker_aborted_by_its_timeout_is_dropped_and_one_stopped_ignored(tmp_path):
    def aborted(environ, start_response):
        raise SystemExit(1)  # gunicorn's worker timeout: handle_abort's sys.exit(1)

    def quit(environ, start_response):
        raise SystemExit(0)  # a quick shutdown (SIGQUIT, SIGINT): abandoned

    with flowctrl.Table(tmp_path / "t") as table:
        task = table.task("api", max_concurrency=2)
        with pytest.raises(SystemExit):
            call_wsgi(wsgi.RateLimitMiddleware(aborted, task=task), {})
        with pytest.raises(SystemExit):
            call_wsgi(wsgi.RateLimitMiddleware(quit, task=task), {})
        stats = task.stats()
        assert (stats["released_dropped"], stats["released_ignored"], stats["in_flight"]) == (1, 1, 0)


class User:
    def __init__(self, name, authenticated=True):
        self.username, self.is_authenticated = name, authenticated

    def get_username(self):
        return self.username


def test_client_address_and_user_keys():
    peer = {"client": ("10.0.0.9", 5555), "headers": [(b"x-forwarded-for", b"6.6.6.6, 203.0.113.7")]}
    assert asgi.client_address()(peer) == "10.0.0.9"  # the header is not trusted by default
    assert asgi.client_address(trusted_hops=1)(peer) == "203.0.113.7"
    assert asgi.client_address(trusted_hops=2)(peer) == "6.6.6.6"
    assert asgi.client_address(trusted_hops=3)(peer) == "10.0.0.9"  # too few hops: the peer
    two_fields = {"client": ("10.0.0.9", 1), "headers": [(b"X-Forwarded-For", b"1.1.1.1"),
                                                           (b"x-forwarded-for", b"2.2.2.2")]}
    assert asgi.client_address(trusted_hops=2)(two_fields) == "1.1.1.1"
    assert asgi.client_address()({"headers": []}) is None  # a Unix socket
    environ = {"REMOTE_ADDR": "10.0.0.9", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 203.0.113.7"}
    assert wsgi.client_address()(environ) == "10.0.0.9"
    assert wsgi.client_address(trusted_hops=1)(environ) == "203.0.113.7"
    assert wsgi.client_address(trusted_hops=3)(environ) == "10.0.0.9"
    assert wsgi.client_address()({}) is None
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError):
            asgi.client_address(trusted_hops=bad)

    assert asgi.user()({"user": User("ada")}) == "ada"
    assert asgi.user()({"user": User("ada", authenticated=False)}) is None
    assert asgi.user()({}) is None
    assert asgi.user("get_username")({"user": User("bob")}) == "bob"
    assert wsgi.user()({"REMOTE_USER": "carol"}) == "carol"
    assert wsgi.user()({"REMOTE_USER": ""}) is None
    assert wsgi.user("flowctrl.user", attribute="username")({"flowctrl.user": User("dan")}) == "dan"


def test_user_keys_apply_each_users_limits(tmp_path):
    with flowctrl.Table(tmp_path / "t") as table:
        task = table.task("api")
        task.set_keys("2/minute")
        app = asgi.RateLimitMiddleware(ok_asgi, task=task, key=asgi.user())
        answers = [call_asgi(app, {"user": User(u)})[0] for u in ["ada"] * 3 + ["bob"]]
        assert answers == [200, 200, 429, 200]
        anonymous = [call_asgi(app, {"user": User("x", False)})[0] for _ in range(3)]
        assert anonymous == [200, 200, 200]  # no key: the task's own limits only


def test_by_path_chooses_the_task_by_the_longest_prefix(tmp_path):
    with flowctrl.Table(tmp_path / "t") as table:
        api, search, deep = table.task("api"), table.task("search"), table.task("deep")
        choose = asgi.by_path({"/": api, "/search": search, "/search/deep/": deep, "/health": None})
        assert choose({"path": "/"}) is api
        assert choose({"path": "/searches"}) is api  # on a segment boundary only
        assert choose({"path": "/search"}) is search
        assert choose({"path": "/search/x"}) is search
        assert choose({"path": "/search/deep/1"}) is deep
        assert choose({"path": "/health"}) is None
        assert wsgi.by_path({"/search": search})({"PATH_INFO": "/other"}) is None
        with pytest.raises(ValueError):
            wsgi.by_path({"search": search})
        app = wsgi.RateLimitMiddleware(hello, task=wsgi.by_path({"/search": search, "/health": None}))
        for path in ["/search/q", "/health", "/other"]:
            assert call_wsgi(app, {"PATH_INFO": path})[0] == "200 OK"
        assert (search.stats()["admitted"], api.stats()["admitted"]) == (1, 0)
        assert search.stats()["released_success"] == 1


def test_header_keys():
    assert asgi.header("X-API-Key")({"headers": [(b"x-api-key", b"k1")]}) == "k1"
    assert asgi.header("X-API-Key")({"headers": []}) is None
    assert wsgi.header("X-API-Key")({"HTTP_X_API_KEY": "k2"}) == "k2"
    assert wsgi.header("X-API-Key")({}) is None
