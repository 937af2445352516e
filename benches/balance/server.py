"""A backend of the balancing experiment: an HTTP server with 8 slots
(a semaphore) and exponentially distributed service times; optionally a
"black hole" from a given wall-clock time on, answering every request with
503 at once (before taking a slot).

    python server.py PORT MEAN_MS [BLACKHOLE_AT_EPOCH]
"""

import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOTS = 8


def main() -> None:
    port, mean_ms = int(sys.argv[1]), float(sys.argv[2])
    blackhole_at = float(sys.argv[3]) if len(sys.argv) > 3 else float("inf")
    slots = threading.Semaphore(SLOTS)
    rng = random.Random(port)
    rng_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            if time.time() >= blackhole_at:
                self.answer(503)
                return
            with rng_lock:
                service = rng.expovariate(1000.0 / mean_ms)
            with slots:
                time.sleep(service)
            self.answer(200)

        def answer(self, code: int) -> None:
            self.send_response_only(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    Server(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
