"""The gunicorn recipe: every request of every worker shares one host-wide cap.

    gunicorn -w 3 --threads 4 [--preload] wsgi_app:app

The table is opened and the task registered at import. Without --preload
each worker imports this module and attaches itself. With --preload the
import runs once, in the master, before fork; each forked worker attaches on
its first acquire, through the handles it inherited (a permit never crosses
fork, and the master takes none). wsgi_lazy.py registers the task in each
worker instead. ``tests/test_recipes.py`` runs all three.

GET /work?hold=SECONDS holds a permit that long (see hold.py); 429 when the
host's cap is reached.
"""

import os

import flowctrl
from hold import hold, hold_seconds

table = flowctrl.Table(os.environ.get("RECIPE_TABLE", "my-service"))
api = table.task("api", max_concurrency=int(os.environ.get("RECIPE_CAP", "5")))


def app(environ, start_response):
    permit = api.try_acquire()
    if permit is None:  # the host's cap is reached: refuse, do not queue
        start_response("429 Too Many Requests", [("Retry-After", "1")])
        return [b"busy\n"]
    with permit:  # released as "success", or "dropped" if the block raises
        body = hold(api, hold_seconds(environ.get("QUERY_STRING", "")))
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
