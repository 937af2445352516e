"""The gunicorn recipe with the task registered lazily, in each worker (the
table opened at import: with --preload, in the master before fork).

    gunicorn -w 3 --threads 4 --preload wsgi_lazy:app
"""

import functools
import os

import flowctrl
from hold import hold, hold_seconds

table = flowctrl.Table(os.environ.get("RECIPE_TABLE", "my-service"))


@functools.lru_cache(maxsize=None)  # threads racing here register twice: harmless
def api():
    return table.task("api", max_concurrency=int(os.environ.get("RECIPE_CAP", "5")))


def app(environ, start_response):
    permit = api().try_acquire()
    if permit is None:
        start_response("429 Too Many Requests", [("Retry-After", "1")])
        return [b"busy\n"]
    with permit:
        body = hold(api(), hold_seconds(environ.get("QUERY_STRING", "")))
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
