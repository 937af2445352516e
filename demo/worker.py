"""A flowctrl demo worker in Python: the same loop as worker.c."""

import sys
import time

import flowctrl


def main() -> None:
    path, name, seconds, rate, burst, attempts = sys.argv[1:7]
    task = flowctrl.Table(path).task(name, local_rate=float(rate), burst=int(burst))
    end = time.monotonic() + float(seconds)
    pause = 1.0 / float(attempts)
    while time.monotonic() < end:
        permit = task.try_acquire()
        if permit is not None:
            permit.release("success")
        time.sleep(pause)


if __name__ == "__main__":
    main()
