"""``Task.acquire_async``: waiting for a permit without blocking the loop.

The wait is the core's: the coroutine takes its place in the task's
host-wide queue (the same queue as every thread's and process's waiting
acquires, in the task's ``wait_order``) and awaits a future of the loop.
The table handle's waiter thread hands it the permit when its turn comes
(or tells it the deadline passed) and wakes the loop through
``call_soon_threadsafe``: nothing polls. A cancelled coroutine leaves the
queue at once; a permit handed to it meanwhile is released, never left
taken. An acquire that may pull global quota from the store runs in the
waiter thread (or, without a timeout, in the loop's executor), and a keyed
one that may call the store for its keys' global rates in the executor, so
the loop never waits on Redis.
"""

from __future__ import annotations

import asyncio
import functools
from types import TracebackType
from typing import TYPE_CHECKING, Generator, Optional, Union

from ._errors import Limited

Key = Union[str, bytes]

if TYPE_CHECKING:
    from ._flowctrl import Permit, Task


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _acquire_key(task: Task, n: int, timeout: Optional[float], key: Key) -> Permit:
    # A keyed wait: one try (off the loop if it may make a round trip),
    # then sleeps on the loop for the time the refusal names (a cap's or
    # the task's own, a short pause) until the deadline. Waiters of one key
    # are admitted in no particular order.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (timeout or 0.0)
    while True:
        try:
            if task._may_pull_key(n):
                return await loop.run_in_executor(
                    None, functools.partial(task.acquire, n, key=key)
                )
            return task.acquire(n, key=key)
        except Limited as refused:
            left = deadline - loop.time()
            pause = max(refused.retry_after or 0.0005, 0.00005)
            if refused.reason == "key_blocked" or left <= 0 or pause > left:
                raise
            await asyncio.sleep(pause)


async def _acquire(
    task: Task, n: int, timeout: Optional[float], key: Optional[Key] = None
) -> Permit:
    if key is not None:
        return await _acquire_key(task, n, timeout, key)
    loop = asyncio.get_running_loop()
    if not timeout:
        # No wait: one try, off the loop if it may make a round trip.
        if task._may_pull(n):
            return await loop.run_in_executor(None, task.acquire, n)
        return task.acquire(n)
    waiter = task._waiter(n, timeout)
    try:
        while True:
            woken: asyncio.Future[None] = loop.create_future()
            permit = waiter.poll(functools.partial(loop.call_soon_threadsafe, _resolve, woken))
            if permit is not None:
                return permit
            await woken
    finally:
        waiter.close()


class AsyncAcquire:
    """``async with task.acquire_async(timeout=...) as permit:`` releases the
    permit on exit ("dropped" if the block raised); ``await`` gives the
    Permit itself. Raises Limited when no permit came in time."""

    __slots__ = ("_task", "_n", "_timeout", "_key", "_permit")

    def __init__(
        self, task: Task, n: int, timeout: Optional[float], key: Optional[Key] = None
    ) -> None:
        self._task = task
        self._n = n
        self._timeout = timeout
        self._key = key
        self._permit: Optional[Permit] = None

    def __await__(self) -> Generator[object, None, Permit]:
        return _acquire(self._task, self._n, self._timeout, self._key).__await__()

    async def __aenter__(self) -> Permit:
        self._permit = await _acquire(self._task, self._n, self._timeout, self._key)
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
