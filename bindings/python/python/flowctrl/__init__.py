"""flowctrl: host-wide flow control shared by every process on a host.

Every worker process, in any language, attaches to one shared-memory task
table and takes admit/reject decisions from the same atomic counters::

    import flowctrl

    table = flowctrl.Table("/dev/shm/my-service")
    task = table.task("backend", local_rate=1000, max_concurrency=64)
    try:
        with task.acquire():
            call_backend()          # released as "success", or "dropped" if it raises
    except flowctrl.Limited as e:
        reject(e.reason)            # "local" or "concurrency"
"""

from ._flowctrl import (
    LAYOUT_VERSION,
    ConfigMismatchError,
    CorruptTableError,
    FlowctrlError,
    IncompatibleTableError,
    InternalError,
    InvalidArgumentError,
    InvalidNameError,
    Limited,
    Permit,
    Table,
    TableFullError,
    TableIOError,
    TablePermissionError,
    Task,
    TooManyProcessesError,
    __version__,
)

__all__ = [
    "LAYOUT_VERSION",
    "ConfigMismatchError",
    "CorruptTableError",
    "FlowctrlError",
    "IncompatibleTableError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidNameError",
    "Limited",
    "Permit",
    "Table",
    "TableFullError",
    "TableIOError",
    "TablePermissionError",
    "Task",
    "TooManyProcessesError",
    "__version__",
]
