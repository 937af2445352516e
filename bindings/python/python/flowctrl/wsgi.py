"""Rate limiting for WSGI applications (Flask, Django, any PEP 3333 app).

::

    import flowctrl
    from flowctrl.wsgi import RateLimitMiddleware, header

    table = flowctrl.Table("my-service")
    api = table.task("api", max_concurrency=64)
    api.set_keys("10/second;1000/hour", max_concurrency=5)

    app = Flask(__name__)
    app.wsgi_app = RateLimitMiddleware(app.wsgi_app, task=api, key=header("X-API-Key"))
    # Django (wsgi.py): application = RateLimitMiddleware(get_wsgi_application(), task=api, key=...)

Every request takes a permit of ``task`` (``key(environ)`` names the
caller: a ``str`` or ``bytes`` applies that key's limits too, None the
task's own only; ``header``, ``client_address`` and ``user`` make the
common ones) and holds it until the server closes the response iterable,
after the last byte; it is then released as "success", or "dropped" when
the application raised, answered 5xx or ran out of time (its worker aborted
by the server's timeout: gunicorn's ``--timeout`` raises ``SystemExit(1)``
in it), or "ignored" when the server stopped before the end of the body
(the client went away). ``task`` may also be a function of the environ
choosing the task per request (``by_path``: a task per path prefix, for a
Flask blueprint's or a Django app's URLs). A
refusal is answered 429 with the real ``Retry-After`` and, for a keyed
request, the ``RateLimit-*`` headers (see ``flowctrl._http``); a blocked key
gets 403.

The middleware decides nothing itself: the task does, host-wide, for every
worker process that shares its table.
"""

from __future__ import annotations

from types import TracebackType
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Tuple,
    Type,
    Union,
)

from . import _http
from ._errors import Limited
from ._flowctrl import Task

__all__ = [
    "RateLimitMiddleware",
    "header",
    "client_address",
    "user",
    "by_path",
    "Environ",
    "StartResponse",
    "WSGIApp",
]

Environ = Dict[str, Any]
ExcInfo = Tuple[Type[BaseException], BaseException, Optional[TracebackType]]
StartResponse = Callable[..., Callable[[bytes], object]]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]


def header(name: str) -> Callable[[Environ], Optional[str]]:
    """A ``key`` function: the request header ``name`` (any case), or None
    when the request has none (the task's own limits then apply)."""
    wanted = "HTTP_" + name.upper().replace("-", "_")

    def key(environ: Environ) -> Optional[str]:
        value = environ.get(wanted)
        return None if value is None else str(value)

    return key


def client_address(trusted_hops: int = 0) -> Callable[[Environ], Optional[str]]:
    """A ``key`` function: the client's IP address, ``REMOTE_ADDR`` (the
    peer of the connection), or None when the server gives none.

    Behind proxies, ``trusted_hops`` is how many of them (each appending the
    address it saw to ``X-Forwarded-For``) stand between the client and this
    server: the key is then the ``trusted_hops``-th address of that header
    from the right, the one the outermost trusted proxy saw; a request with
    fewer addresses falls back to the peer. The header is never read by
    default (0): any client can write it.
    """
    hops = _http.check_hops(trusted_hops)

    def key(environ: Environ) -> Optional[str]:
        if hops:
            value = environ.get("HTTP_X_FORWARDED_FOR")
            forwarded = _http.forwarded_for([str(value)], hops) if value else None
            if forwarded is not None:
                return forwarded
        address = environ.get("REMOTE_ADDR")
        return str(address) if address else None

    return key


def user(variable: str = "REMOTE_USER", attribute: Optional[str] = None) -> Callable[[Environ], Optional[str]]:
    """A ``key`` function: the authenticated user of ``environ[variable]``
    (default ``REMOTE_USER``: what the server or an authenticating proxy
    sets), as text, or its ``attribute`` when the variable holds a user
    object (a method is called). None, the task's own limits only, for a
    request without one or with an anonymous one (``is_authenticated``
    false). Django's ``request.user`` and Flask-Login's ``current_user``
    are set inside the framework, after a WSGI middleware has run: key on
    what the environ holds, or on a header."""

    def key(environ: Environ) -> Optional[str]:
        return _http.user_key(environ.get(variable), attribute)

    return key


def by_path(routes: Mapping[str, Optional[Task]]) -> Callable[[Environ], Optional[Task]]:
    """A ``task`` function: a task per path prefix of ``PATH_INFO`` (the path
    within the application), the longest that matches on a segment boundary
    (``{"/search": search, "/": api}``: ``/search`` and ``/search/...`` take
    ``search``'s permits, every other path ``api``'s). A prefix mapped to
    None, or a path no prefix matches, is not limited."""
    task_of = _http.by_path(routes)

    def task(environ: Environ) -> Optional[Task]:
        return task_of(str(environ.get("PATH_INFO", "")))

    return task


class _Body:
    """The application's response iterable, watched: its end marks the
    response whole; ``close`` (which PEP 3333 servers call, also when they
    stop early) releases the permit."""

    __slots__ = ("_result", "_iterator", "_exchange")

    def __init__(self, result: Iterable[bytes], exchange: _http.Exchange) -> None:
        self._result = result
        self._iterator: Optional[Iterator[bytes]] = None
        self._exchange = exchange

    def __iter__(self) -> Iterator[bytes]:
        self._iterator = iter(self._result)
        return self

    def __next__(self) -> bytes:
        if self._iterator is None:
            self._iterator = iter(self._result)
        try:
            return next(self._iterator)
        except StopIteration:
            self._exchange.complete = True
            raise
        except BaseException as error:
            self._exchange.raised(error)
            raise

    def close(self) -> None:
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        finally:
            self._exchange.finish()


class RateLimitMiddleware:
    """``RateLimitMiddleware(app, task=..., key=None, cost=1, ...)``.

    ``task``: the task whose permits requests take, or a function of the
    environ choosing it per request (``by_path``); a request it gives None
    passes through unlimited. ``key``: a function of the environ giving the caller's key (``str`` or
    ``bytes``), or None for the task's own limits only; None (the default)
    for every request. ``cost``: permits a request takes, or a function of
    the environ. ``timeout``: seconds to wait for a permit (the worker
    thread sleeps) before refusing; None refuses at once.
    ``rate_limit_headers``: add the key's RateLimit-* headers to admitted
    keyed responses too (they always come with a keyed refusal).
    ``unknown_retry_after``: the ``Retry-After`` of a refusal whose wait the
    library cannot know (a concurrency cap, where a release decides); None
    leaves the header out.
    """

    def __init__(
        self,
        app: WSGIApp,
        *,
        task: Union[Task, Callable[[Environ], Optional[Task]]],
        key: Optional[Callable[[Environ], Union[str, bytes, None]]] = None,
        cost: Union[int, Callable[[Environ], int]] = 1,
        timeout: Optional[float] = None,
        rate_limit_headers: bool = True,
        unknown_retry_after: Optional[int] = 1,
    ) -> None:
        self.app = app
        self.task = task
        self.key = key
        self.cost = cost
        self.timeout = timeout
        self.rate_limit_headers = rate_limit_headers
        self.unknown_retry_after = unknown_retry_after

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        task = self.task if isinstance(self.task, Task) else self.task(environ)
        if task is None:
            return self.app(environ, start_response)
        key = self.key(environ) if self.key is not None else None
        try:
            permit = task.acquire(_http.cost_of(self.cost, environ), self.timeout, key=key)
        except Limited as refused:
            status, phrase, headers, body = _http.refusal(task, key, refused, self.unknown_retry_after)
            start_response(f"{status} {phrase}", headers)
            return [body]
        exchange = _http.Exchange(permit)

        def start_watched(
            status: str, headers: List[Tuple[str, str]], exc_info: Optional[ExcInfo] = None
        ) -> Callable[[bytes], object]:
            exchange.status = int(status.split(None, 1)[0])
            if key is not None and self.rate_limit_headers:
                headers = [*headers, *_http.rate_limit_headers(task, key)]
            if exc_info is None:
                return start_response(status, headers)
            return start_response(status, headers, exc_info)

        try:
            result = self.app(environ, start_watched)
        except BaseException as error:
            exchange.raised(error)
            exchange.finish()
            raise
        return _Body(result, exchange)
