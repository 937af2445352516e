"""flowctrl.wsgi.RateLimitMiddleware around a Flask app, as
tests/test_middleware.py runs it:

    gunicorn --workers 2 --worker-class sync middleware_wsgi:app

The task (its cap and key limits) is set up by the test in the table named
by RECIPE_TABLE; the app attaches to it by name (MW_TASK). The caller's key
is the X-API-Key header; a request without one meets the task's own limits.

GET /work?hold=SECONDS   holds its permit that long, answers JSON
GET /fail                answers 503 (released as "dropped")
GET /raise               raises (500 by Flask; "dropped")
GET /stream?chunks=N&every=SECONDS   a slow streamed body
GET /search?hold=SECONDS as /work, on the permits of the task MW_TASK-search
                         (a task per path prefix: by_path)
"""

import os
import time

import flowctrl
from flask import Flask, Response, request
from flowctrl.wsgi import RateLimitMiddleware, by_path, header
from hold import report

table = flowctrl.Table(os.environ["RECIPE_TABLE"])
api = table.task(os.environ["MW_TASK"])
search = table.task(os.environ["MW_TASK"] + "-search")
app = Flask(__name__)


@app.get("/work")
@app.get("/search")
def work():
    seconds = float(request.args.get("hold", "0"))
    t0 = time.monotonic_ns()
    in_flight = api.stats()["in_flight"]
    time.sleep(seconds)
    return Response(report(t0, time.monotonic_ns(), in_flight), mimetype="application/json")


@app.get("/fail")
def fail():
    return Response("unavailable\n", status=503)


@app.get("/raise")
def boom():
    raise RuntimeError("the handler failed")


@app.get("/stream")
def stream():
    chunks = int(request.args.get("chunks", "10"))
    every = float(request.args.get("every", "0.05"))

    def body():
        for i in range(chunks):
            yield f"chunk {i}\n".encode()
            time.sleep(every)

    return Response(body(), mimetype="text/plain")


app.wsgi_app = RateLimitMiddleware(
    app.wsgi_app, task=by_path({"/search": search, "/": api}), key=header("X-API-Key")
)
