"""flowctrl.asgi.RateLimitMiddleware in a Starlette app, as
tests/test_middleware.py runs it:

    uvicorn --workers 2 middleware_asgi:app

The task (its cap and key limits) is set up by the test in the table named
by RECIPE_TABLE; the app attaches to it by name (MW_TASK). The caller's key
is the X-API-Key header; a request without one meets the task's own limits.

GET /work?hold=SECONDS   holds its permit that long, answers JSON
GET /fail                answers 503 (released as "dropped")
GET /raise               raises (500 by Starlette; "dropped")
GET /stream?chunks=N&every=SECONDS   a slow streamed body
GET /search?hold=SECONDS as /work, with a middleware of its own on the route:
                         the permits of the task MW_TASK-search
A request with an X-Deadline header (seconds) is cut off after that long by
an asyncio.timeout outside the middleware and answered 504, as a service's
own deadline would.
"""

import asyncio
import os
import time

import flowctrl
from flowctrl.asgi import RateLimitMiddleware, by_path, header
from hold import report
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

table = flowctrl.Table(os.environ["RECIPE_TABLE"])
api = table.task(os.environ["MW_TASK"])
search = table.task(os.environ["MW_TASK"] + "-search")


async def work(request: Request) -> Response:
    seconds = float(request.query_params.get("hold", "0"))
    t0 = time.monotonic_ns()
    in_flight = api.stats()["in_flight"]
    await asyncio.sleep(seconds)
    return Response(report(t0, time.monotonic_ns(), in_flight), media_type="application/json")


async def fail(request: Request) -> Response:
    return PlainTextResponse("unavailable\n", status_code=503)


async def boom(request: Request) -> Response:
    raise RuntimeError("the handler failed")


async def stream(request: Request) -> Response:
    chunks = int(request.query_params.get("chunks", "10"))
    every = float(request.query_params.get("every", "0.05"))

    async def body():
        for i in range(chunks):
            yield f"chunk {i}\n".encode()
            await asyncio.sleep(every)

    return StreamingResponse(body(), media_type="text/plain")


class Deadline:
    """Cancels a request that takes longer than its X-Deadline header says,
    answering 504 if nothing was sent yet."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        seconds = dict(scope.get("headers", ())).get(b"x-deadline")
        if scope["type"] != "http" or seconds is None:
            await self.app(scope, receive, send)
            return
        started = False

        async def send_seen(message):
            nonlocal started
            started = True
            await send(message)

        try:
            await asyncio.wait_for(self.app(scope, receive, send_seen), float(seconds))
        except asyncio.TimeoutError:
            if not started:
                await PlainTextResponse("deadline passed\n", status_code=504)(scope, receive, send)


app = Starlette(
    routes=[
        Route("/work", work),
        Route("/fail", fail),
        Route("/raise", boom),
        Route("/stream", stream),
        # A task per route: this route's own middleware, inside the app's.
        Route("/search", work, middleware=[Middleware(RateLimitMiddleware, task=search)]),
    ],
    middleware=[
        Middleware(Deadline),
        Middleware(RateLimitMiddleware, task=by_path({"/search": None, "/": api}), key=header("X-API-Key")),
    ],
)
