"""Load for the uvicorn case: CONNECTIONS keep-alive connections, each
sending its next request as soon as the previous one is answered, for
SECONDS. Raw HTTP/1.1 over asyncio streams: a client library would cost
more CPU than the service on a 2-core machine.

    pyclient.py PORT SECONDS CONNECTIONS OUT

Writes OUT, one line per answer: start_ns wait_ns hold_ns ok latency_ns
(start relative to the client's start; wait and hold as the handler
measured them), the format benches/waiting/report.py reads.
"""

import asyncio
import sys
import time

REQUEST = b"GET / HTTP/1.1\r\nHost: waitbench\r\n\r\n"


async def connection(port: int, start: int, end: int, rows: list) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic_ns() < end:
            t0 = time.monotonic_ns()
            writer.write(REQUEST)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = (await reader.readexactly(length)).split()
            t1 = time.monotonic_ns()
            ok, wait, hold = int(body[0]), int(body[1]), int(body[2])
            rows.append(f"{t0 - start} {wait} {hold} {ok} {t1 - t0}")
    finally:
        writer.close()


async def main() -> None:
    port, seconds, connections, out = (
        int(sys.argv[1]),
        float(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
    )
    rows: list = []
    start = time.monotonic_ns()
    end = start + int(seconds * 1e9)
    await asyncio.gather(*(connection(port, start, end, rows) for _ in range(connections)))
    with open(out, "w") as f:
        f.write("\n".join(rows) + "\n")


asyncio.run(main())
