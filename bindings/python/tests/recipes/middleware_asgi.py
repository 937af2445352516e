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
"""

import asyncio
import os
import time

import flowctrl
from flowctrl.asgi import RateLimitMiddleware, header
from hold import report
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

table = flowctrl.Table(os.environ["RECIPE_TABLE"])
api = table.task(os.environ["MW_TASK"])


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


app = Starlette(
    routes=[Route("/work", work), Route("/fail", fail), Route("/raise", boom), Route("/stream", stream)],
    middleware=[Middleware(RateLimitMiddleware, task=api, key=header("X-API-Key"))],
)
