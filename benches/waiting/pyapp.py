"""The uvicorn case of the waiting benchmarks: a Starlette app
whose handler holds a permit of a task capped at 4 for 20 ms, waiting up to
2 s for it with ``async with task.acquire_async(timeout=2)``.

    uvicorn pyapp:app --workers 2 --app-dir benches/waiting

The table is ``$WAITBENCH_TABLE``. The answer's body is
"<ok> <wait_ns> <hold_ns> <pid>", measured here, so the client needs no
clock of ours: wait = from entering the handler to holding the permit,
hold = from the permit to its release.
"""

import asyncio
import os
import time

import flowctrl
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

TABLE = flowctrl.Table(os.environ["WAITBENCH_TABLE"])
TASK = TABLE.task("waitbench-py", max_concurrency=4)
HOLD = float(os.environ.get("WAITBENCH_HOLD", "0.02"))


async def limited(request):
    t0 = time.monotonic_ns()
    try:
        async with TASK.acquire_async(timeout=2):
            t1 = time.monotonic_ns()
            await asyncio.sleep(HOLD)
        t2 = time.monotonic_ns()
        body = f"1 {t1 - t0} {t2 - t1} {os.getpid()}"
    except flowctrl.Limited:
        body = f"0 {time.monotonic_ns() - t0} 0 {os.getpid()}"
    return PlainTextResponse(body)


app = Starlette(routes=[Route("/", limited)])
