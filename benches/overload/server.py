"""The overloaded service: 8 requests served at a time, each held for the
service time; the others queue in the server (one thread per connection).

    python server.py PORT_FILE SWITCH_AT FAST_MS SLOW_MS

The service time is FAST_MS until CLOCK_MONOTONIC passes SWITCH_AT (seconds),
SLOW_MS after. Writes the port it listens on to PORT_FILE.
"""

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SLOTS = 8


def main() -> None:
    port_file, switch_at, fast_ms, slow_ms = (
        sys.argv[1],
        float(sys.argv[2]),
        float(sys.argv[3]),
        float(sys.argv[4]),
    )
    slots = threading.BoundedSemaphore(SLOTS)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # One write per response would do too; without this, the body waits
        # for the ACK of the headers (Nagle and delayed ACK: 40 ms).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            with slots:
                ms = fast_ms if time.monotonic() < switch_at else slow_ms
                time.sleep(ms / 1000)
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client that timed out and hung up: expected under overload

    server = Server(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
