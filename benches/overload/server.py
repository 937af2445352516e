"""The overloaded service: SLOTS requests served at a time, each held for
the service time; the others queue in the server (one thread per
connection).

    python server.py PORT_FILE SWITCH_AT SLOTS SLOTS_AFTER MS MS_AFTER

Until CLOCK_MONOTONIC passes SWITCH_AT (seconds) it has SLOTS slots and a
service time of MS; after, SLOTS_AFTER and MS_AFTER (a capacity change).
Writes the port it listens on to PORT_FILE.
"""

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    port_file = sys.argv[1]
    switch_at = float(sys.argv[2])
    slots, slots_after = int(sys.argv[3]), int(sys.argv[4])
    ms, ms_after = float(sys.argv[5]), float(sys.argv[6])
    free = threading.Condition()
    busy = [0]

    def capacity() -> tuple[int, float]:
        if time.monotonic() < switch_at:
            return slots, ms
        return slots_after, ms_after

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # One write per response would do too; without this, the body waits
        # for the ACK of the headers (Nagle and delayed ACK: 40 ms).
        disable_nagle_algorithm = True

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            with free:
                # A slot count that drops mid-run takes effect as the busy
                # slots finish; one that rises wakes everyone at the switch.
                while busy[0] >= capacity()[0]:
                    free.wait()
                busy[0] += 1
            try:
                time.sleep(capacity()[1] / 1000)
            finally:
                with free:
                    busy[0] -= 1
                    free.notify()
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

    def wake_all() -> None:
        with free:
            free.notify_all()

    threading.Timer(max(0.0, switch_at - time.monotonic()), wake_all).start()
    server = Server(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
