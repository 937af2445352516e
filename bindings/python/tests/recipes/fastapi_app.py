"""flowctrl.asgi.RateLimitMiddleware in a FastAPI app, as
tests/test_frameworks.py runs it:

    uvicorn --no-proxy-headers fastapi_app:app

The setup is the two lines of docs/guide/middleware.md: the import and
``app.add_middleware``. A task per path prefix (``by_path``): /search takes
the permits of the task "fastapi-search", every other path those of
"fastapi"; the caller's key is its address as the one trusted proxy in
front saw it (the last X-Forwarded-For entry). The test sets the tasks up
in the table named by RECIPE_TABLE.

GET /work?hold=SECONDS     holds its permit that long
GET /search?hold=SECONDS   the same, on the search task
GET /backend               a backend call that times out (asyncio.TimeoutError: 500)
"""

import asyncio
import os

import flowctrl
from fastapi import FastAPI
from flowctrl.asgi import RateLimitMiddleware, by_path, client_address

table = flowctrl.Table(os.environ["RECIPE_TABLE"])
api, search = table.task("fastapi"), table.task("fastapi-search")

app = FastAPI()
app.add_middleware(
    RateLimitMiddleware, task=by_path({"/search": search, "/": api}), key=client_address(trusted_hops=1)
)


@app.get("/work")
@app.get("/search")
async def work(hold: float = 0.0) -> dict:
    await asyncio.sleep(hold)
    return {"held": hold}


@app.get("/backend")
async def backend() -> dict:
    await asyncio.wait_for(asyncio.sleep(10), 0.05)  # the backend did not answer in time
    return {}
