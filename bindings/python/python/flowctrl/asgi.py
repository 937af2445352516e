"""Rate limiting for ASGI applications (Starlette, FastAPI, any ASGI 3 app).

::

    import flowctrl
    from flowctrl.asgi import RateLimitMiddleware, header

    table = flowctrl.Table("my-service")
    api = table.task("api", max_concurrency=64)
    api.set_keys("10/second;1000/hour", max_concurrency=5)

    app = Starlette(routes=..., middleware=[
        Middleware(RateLimitMiddleware, task=api, key=header("X-API-Key")),
    ])
    # FastAPI: app.add_middleware(RateLimitMiddleware, task=api, key=...)

Every HTTP request takes a permit of ``task`` (``key(scope)`` names the
caller: a ``str`` or ``bytes`` applies that key's limits too, None the
task's own only; ``header``, ``client_address`` and ``user`` make the
common ones) and holds it until the response's last body chunk is sent;
it is then released as "success", or "dropped" when the application raised,
answered 5xx or ran out of time (its coroutine cancelled while the client
was still there: an ``asyncio.timeout`` around it, a server's shutdown
deadline), or "ignored" when the client disconnected first. ``task`` may
also be a function of the scope choosing the task per request
(``by_path``: a task per path prefix), or be set per route where the
framework allows (Starlette's ``Route(..., middleware=[...])``). A refusal
is answered 429 with the real ``Retry-After`` and, for a keyed request, the
``RateLimit-*`` headers (see ``flowctrl._http``); a blocked key gets 403.
Other scopes (lifespan, websocket) pass through untouched.

The middleware decides nothing itself: the task does, host-wide, for every
worker process that shares its table.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping, MutableMapping, Optional, Union

from . import _http
from ._errors import Limited
from ._flowctrl import Task

__all__ = [
    "RateLimitMiddleware",
    "header",
    "client_address",
    "user",
    "by_path",
    "Scope",
    "Message",
    "Receive",
    "Send",
    "ASGIApp",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(name: str) -> Callable[[Scope], Optional[str]]:
    """A ``key`` function: the request header ``name`` (any case), or None
    when the request has none (the task's own limits then apply)."""
    wanted = name.lower().encode("latin-1")

    def key(scope: Scope) -> Optional[str]:
        for field, value in scope.get("headers", ()):
            if field.lower() == wanted:
                return bytes(value).decode("latin-1")
        return None

    return key


def client_address(trusted_hops: int = 0) -> Callable[[Scope], Optional[str]]:
    """A ``key`` function: the client's IP address, ``scope["client"]`` (the
    peer of the connection), or None when the server gives none (a Unix
    socket).

    Behind proxies, ``trusted_hops`` is how many of them (each appending the
    address it saw to ``X-Forwarded-For``) stand between the client and this
    server: the key is then the ``trusted_hops``-th address of that header
    from the right, the one the outermost trusted proxy saw; a request with
    fewer addresses falls back to the peer. The header is never read by
    default (0): any client can write it. A server that rewrites
    ``scope["client"]`` from the header itself (uvicorn does for the proxies
    of ``--forwarded-allow-ips``, 127.0.0.1 by default) already gives the
    forwarded address: keep ``trusted_hops=0`` there.
    """
    hops = _http.check_hops(trusted_hops)

    def key(scope: Scope) -> Optional[str]:
        if hops:
            values = [
                bytes(v).decode("latin-1") for f, v in scope.get("headers", ()) if f.lower() == b"x-forwarded-for"
            ]
            forwarded = _http.forwarded_for(values, hops)
            if forwarded is not None:
                return forwarded
        client = scope.get("client")
        return str(client[0]) if client else None

    return key


def user(attribute: Optional[str] = "username") -> Callable[[Scope], Optional[str]]:
    """A ``key`` function: the authenticated user of ``scope["user"]`` (set
    by Starlette's ``AuthenticationMiddleware``, which must then come before
    this middleware), as its ``attribute`` (a method is called; None: the
    user object itself, as text). None, the task's own limits only, for a
    request without a user or with an anonymous one (``is_authenticated``
    false). FastAPI's dependencies run inside the application, after the
    middleware: authenticate in a middleware to key on the user."""

    def key(scope: Scope) -> Optional[str]:
        return _http.user_key(scope.get("user"), attribute)

    return key


def by_path(routes: Mapping[str, Optional[Task]]) -> Callable[[Scope], Optional[Task]]:
    """A ``task`` function: a task per path prefix of ``scope["path"]``, the
    longest that matches on a segment boundary (``{"/search": search, "/":
    api}``: ``/search`` and ``/search/...`` take ``search``'s permits, every
    other path ``api``'s). A prefix mapped to None, or a path no prefix
    matches, is not limited."""
    task_of = _http.by_path(routes)

    def task(scope: Scope) -> Optional[Task]:
        return task_of(str(scope.get("path", "")))

    return task


def _encode(headers: _http.Headers) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


class RateLimitMiddleware:
    """``RateLimitMiddleware(app, task=..., key=None, cost=1, ...)``.

    ``task``: the task whose permits requests take, or a function of the
    scope choosing it per request (``by_path``); a request it gives None
    passes through unlimited. ``key``: a function of the scope giving the caller's key (``str`` or
    ``bytes``), or None for the task's own limits only; None (the default)
    for every request. ``cost``: permits a request takes, or a function of
    the scope. ``timeout``: seconds to wait for a permit (without blocking
    the loop) before refusing; None refuses at once. ``rate_limit_headers``:
    add the key's RateLimit-* headers to admitted keyed responses too (they
    always come with a keyed refusal). ``unknown_retry_after``: the
    ``Retry-After`` of a refusal whose wait the library cannot know (a
    concurrency cap, where a release decides); None leaves the header out.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        task: Union[Task, Callable[[Scope], Optional[Task]]],
        key: Optional[Callable[[Scope], Union[str, bytes, None]]] = None,
        cost: Union[int, Callable[[Scope], int]] = 1,
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        task = self.task if isinstance(self.task, Task) else self.task(scope)
        if task is None:
            await self.app(scope, receive, send)
            return
        key = self.key(scope) if self.key is not None else None
        try:
            permit = await task.acquire_async(
                _http.cost_of(self.cost, scope), self.timeout, key=key
            )
        except Limited as refused:
            status, _, headers, body = _http.refusal(task, key, refused, self.unknown_retry_after)
            await send({"type": "http.response.start", "status": status, "headers": _encode(headers)})
            await send({"type": "http.response.body", "body": body})
            return
        exchange = _http.Exchange(permit)
        extra: list[tuple[bytes, bytes]] = []
        trailers = False

        async def receive_watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect" and not exchange.complete:
                exchange.disconnected = True
            return message

        async def send_watched(message: Message) -> None:
            nonlocal trailers
            kind = message["type"]
            if kind == "http.response.start":
                exchange.status = int(message["status"])
                trailers = bool(message.get("trailers", False))
                if key is not None and self.rate_limit_headers:
                    extra.extend(_encode(_http.rate_limit_headers(task, key)))
                if extra:
                    message = {**message, "headers": [*message.get("headers", ()), *extra]}
            try:
                await send(message)
            except OSError:  # servers of ASGI 2.4 raise when the client is gone
                exchange.disconnected = True
                raise
            if (
                (kind == "http.response.body" and not trailers and not message.get("more_body", False))
                or (kind == "http.response.trailers" and not message.get("more_trailers", False))
                or kind == "http.response.pathsend"
            ):
                exchange.complete = True
                exchange.finish()

        try:
            await self.app(scope, receive_watched, send_watched)
        except BaseException as error:
            exchange.raised(error)
            raise
        finally:
            exchange.finish()
