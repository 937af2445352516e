"""``Task.acquire_async``: waiting for a permit without blocking the loop.

The coroutine polls: it tries without waiting, and sleeps on the event loop
(``asyncio.sleep``) between tries, 0.5 ms at first, doubling up to 20 ms.
Why not a thread that blocks in the waiting acquire (``run_in_executor``)?
A cancelled coroutine cannot cancel that thread: it could still take a
permit nobody will release until it is collected, and a burst of waiters
would occupy the executor's threads. Polling holds nothing between tries,
so cancellation is always clean; its cost is at most 50 tries a second per
waiter, each a non-blocking acquire of well under a microsecond. A try that
may make a round trip to the store (a pull of global quota, a probe) runs in
the loop's executor instead, so the loop never waits on Redis.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING, Generator, Optional

if TYPE_CHECKING:
    from ._flowctrl import Permit, Task

_FIRST_SLEEP = 0.0005
_LONGEST_SLEEP = 0.02


async def _acquire(task: Task, n: int, timeout: Optional[float]) -> Permit:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (timeout or 0.0)
    pause = _FIRST_SLEEP
    while True:
        if task._may_pull(n):
            # A round trip to the store: off the loop's thread. A permit of a
            # cancelled coroutine is released as ignored when collected.
            permit = await loop.run_in_executor(None, task.try_acquire, n)
        else:
            permit = task.try_acquire(n)
        if permit is not None:
            return permit
        left = deadline - loop.time()
        if left <= 0:
            # One last try that names the limit that refused (Limited).
            return task.acquire(n)
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, _LONGEST_SLEEP)


class AsyncAcquire:
    """``async with task.acquire_async(timeout=...) as permit:`` releases the
    permit on exit ("dropped" if the block raised); ``await`` gives the
    Permit itself. Raises Limited when no permit came in time."""

    __slots__ = ("_task", "_n", "_timeout", "_permit")

    def __init__(self, task: Task, n: int, timeout: Optional[float]) -> None:
        self._task = task
        self._n = n
        self._timeout = timeout
        self._permit: Optional[Permit] = None

    def __await__(self) -> Generator[object, None, Permit]:
        return _acquire(self._task, self._n, self._timeout).__await__()

    async def __aenter__(self) -> Permit:
        self._permit = await _acquire(self._task, self._n, self._timeout)
        return self._permit

    async def __aexit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        permit, self._permit = self._permit, None
        if permit is not None:
            permit.__exit__(exc_type, exc_value, traceback)
