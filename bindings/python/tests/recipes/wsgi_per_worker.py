"""A broken deployment, for the recipe tests' negative control: each worker
opens a table of its own (its pid in the path), so the "host-wide" cap is
per worker and the host admits up to workers x cap. The tests' interval
check must catch it. Not a recipe: never do this.
"""

import os

import flowctrl
from hold import hold, hold_seconds

table = flowctrl.Table(f"{os.environ.get('RECIPE_TABLE', 'my-service')}.{os.getpid()}")
api = table.task("api", max_concurrency=int(os.environ.get("RECIPE_CAP", "5")))


def app(environ, start_response):
    permit = api.try_acquire()
    if permit is None:
        start_response("429 Too Many Requests", [])
        return [b"busy\n"]
    with permit:
        body = hold(api, hold_seconds(environ.get("QUERY_STRING", "")))
    start_response("200 OK", [])
    return [body]
