"""The uvicorn recipe: an ASGI (Starlette) app whose requests share one
host-wide cap, waiting up to 50 ms for a permit without blocking the loop.

    uvicorn --workers 2 asgi_app:app

uvicorn starts its workers with multiprocessing's spawn: each imports this
module, so each opens the table and registers the task itself.

GET /work?hold=SECONDS as in wsgi_app; 503 when no permit came in time.
"""

import asyncio
import os
import time

import flowctrl
from hold import report
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

table = flowctrl.Table(os.environ.get("RECIPE_TABLE", "my-service"))
api = table.task("api", max_concurrency=int(os.environ.get("RECIPE_CAP", "5")))


async def work(request: Request) -> Response:
    seconds = float(request.query_params.get("hold", "0.1"))
    try:
        async with api.acquire_async(timeout=0.05):
            t0 = time.monotonic_ns()
            in_flight = api.stats()["in_flight"]
            await asyncio.sleep(seconds)
            body = report(t0, time.monotonic_ns(), in_flight)
    except flowctrl.Limited:
        return PlainTextResponse("busy\n", status_code=503, headers={"Retry-After": "1"})
    return Response(body, media_type="application/json")


app = Starlette(routes=[Route("/work", work)])
