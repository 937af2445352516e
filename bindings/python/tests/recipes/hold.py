"""What the recipe apps do while they hold a permit (not part of a recipe):
sleep ``?hold=SECONDS`` and answer what was seen, for the tests' checks."""

import json
import os
import time
from urllib.parse import parse_qs


def hold_seconds(query_string):
    return float(parse_qs(query_string).get("hold", ["0.1"])[0])


def report(t0, t1, in_flight):
    """The answer of a 200: the pid, the monotonic ns just after the acquire
    and just before the release, and the host's in_flight then."""
    return json.dumps({"pid": os.getpid(), "t0": t0, "t1": t1, "in_flight": in_flight}).encode()


def hold(task, seconds):
    """Holds (the caller has the permit) and returns the answer's body."""
    t0 = time.monotonic_ns()
    in_flight = task.stats()["in_flight"]
    time.sleep(seconds)
    return report(t0, time.monotonic_ns(), in_flight)
