"""flowctrl: host-wide flow control shared by every process on a host.

Every worker process, in any language, attaches to one shared-memory task
table and takes admit/reject decisions from the same atomic counters::

    import flowctrl

    with flowctrl.Table("/dev/shm/my-service") as table:
        task = table.task("backend", local_rate=1000, max_concurrency=64)
        try:
            with task.acquire():
                call_backend()      # released as "success", or "dropped" if it raises
        except flowctrl.Limited as e:
            reject(e.reason)        # "local", "global" or "concurrency"

Balancers choose a backend per request from statistics every process on
the host shares (in flight, RTT, failures)::

    lb = table.balancer("api", backends=["10.0.0.1:80", "10.0.0.2:80"])
    with lb.pick() as choice:   # "success", or "dropped" (a failure) if it raises
        call(choice.backend)

Web applications take a permit per request through a middleware:
``flowctrl.asgi.RateLimitMiddleware`` (Starlette, FastAPI) and
``flowctrl.wsgi.RateLimitMiddleware`` (Flask, Django) answer a refusal with
429, the real ``Retry-After`` and the key's RateLimit-* headers.

A rejection raises ``Limited`` (``try_acquire`` returns None instead). It is a
decision, not an error, so it is *not* a ``FlowctrlError``: ``except
flowctrl.FlowctrlError`` catches failures only. Each error also derives from
the built-in exception that fits:

==========================  ==================================================
``InvalidArgumentError``    ``ValueError`` (``InvalidNameError`` below it)
``ConfigMismatchError``     ``ValueError``
``TableClosedError``        ``ValueError``, as for a closed file
``TablePermissionError``    ``PermissionError``
``TableIOError``            ``OSError``
``CorruptTableError``       ``OSError``
``IncompatibleTableError``  ``OSError``
``TableFullError``          ``OSError`` (no task slot left, like ``ENOSPC``)
``TooManyProcessesError``   ``OSError`` (no process slot left, like ``EMFILE``)
``FlowctrlTimeoutError``    ``TimeoutError``: another process held a claim
``StoreError``              ``ConnectionError``: the quota store failed
``InternalError``           ``RuntimeError``: a bug in flowctrl
==========================  ==================================================

All exceptions pickle, so they cross ``multiprocessing`` intact (``Limited``
keeps its ``reason``).

Log lines — the quota store failing and answering again, a table file
replaced, a dead process's permits given back — go to the standard
``logging`` module, loggers ``flowctrl.store`` and ``flowctrl.table``
(children of ``flowctrl``), at most one per kind of event and task every
10 s ("... (and 41 more since)")::

    logging.getLogger("flowctrl").setLevel(logging.WARNING)

``Table.close()`` (or leaving ``with``) drops the handle; afterwards the table
and every Task made from it raise ``TableClosedError``. Permits already taken
can still be released, so their concurrency returns to the host; the process
detaches from the table when no Task or Permit of it is left.
"""

from ._errors import (
    ConfigMismatchError,
    CorruptTableError,
    FlowctrlError,
    FlowctrlTimeoutError,
    IncompatibleTableError,
    InternalError,
    InvalidArgumentError,
    InvalidNameError,
    Limited,
    StoreError,
    TableClosedError,
    TableFullError,
    TableIOError,
    TablePermissionError,
    TooManyProcessesError,
)
from ._flowctrl import (
    LAYOUT_VERSION,
    NO_CAP,
    Balancer,
    Choice,
    Permit,
    Store,
    Table,
    Task,
    __version__,
)
from ._types import (
    BackendStats,
    Fleet,
    StoredTask,
    HostRecord,
    HotKey,
    HotKeys,
    KeyGlobalFields,
    StoredKeys,
    Consistency,
    ProcessStats,
    Settings,
    Stats,
    TableCheck,
)

__all__ = [
    "LAYOUT_VERSION",
    "NO_CAP",
    "BackendStats",
    "Balancer",
    "Choice",
    "ConfigMismatchError",
    "CorruptTableError",
    "FlowctrlError",
    "FlowctrlTimeoutError",
    "IncompatibleTableError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidNameError",
    "Limited",
    "Permit",
    "Settings",
    "Stats",
    "Store",
    "StoreError",
    "Fleet",
    "StoredTask",
    "HostRecord",
    "HotKey",
    "HotKeys",
    "KeyGlobalFields",
    "StoredKeys",
    "ProcessStats",
    "Consistency",
    "TableCheck",
    "Table",
    "TableClosedError",
    "TableFullError",
    "TableIOError",
    "TablePermissionError",
    "Task",
    "TooManyProcessesError",
    "__version__",
]
