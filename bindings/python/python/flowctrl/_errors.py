"""The exceptions of flowctrl.

They are plain Python classes, defined here rather than in the extension
module, so they behave like any other exception: they pickle by name (a
``multiprocessing`` worker's error reaches the parent as the same type), they
mix in the built-in exception that fits, and they can be subclassed. The
extension module imports them from here to raise them. Their ``__module__``
is ``flowctrl``, where they are documented and exported.

Two families:

* ``Limited`` is a *decision*, not an error: a limit turned a request away
  (the C face's statuses 1-99). It is not a ``FlowctrlError``, so
  ``except flowctrl.FlowctrlError`` does not swallow rejections.
* ``FlowctrlError`` and its subclasses are errors (the C face's statuses of
  100 and above). Each also derives from the built-in exception that says the
  same thing: a bad argument is a ``ValueError``; a problem with the table as
  a shared resource (its file, its task or process slots) is an ``OSError``
  (like ``ENOSPC`` or ``EMFILE`` for a full table), with ``errno`` None; a
  permission problem is a ``PermissionError``, a claim held past its deadline
  a ``TimeoutError``, a bug in flowctrl a ``RuntimeError``.
"""

from typing import Any, Dict, Literal, Optional, Tuple, Type


class Limited(Exception):
    """A limit rejected the request; ``reason`` says which one.

    ``reason`` is ``"local"`` (the host's rate for the task is used up),
    ``"global"`` (the cluster-wide quota) or ``"concurrency"`` (the host's
    concurrency cap is reached); for a keyed acquire also ``"key_rate"``,
    ``"key_concurrency"``, ``"key_blocked"`` or ``"key_global"`` (the key's
    own limits; ``"key_global"``: its rate across the fleet, with
    ``retry_after`` at its slice's end). Not a FlowctrlError: a rejection is a
    decision, not a failure. ``retry_after`` is how many seconds until the
    request may be admitted where that is known (the local rate's next
    admission; when the slice releases more, or ends, for ``"global"``),
    else None (a concurrency cap: a release decides).
    """

    reason: Literal[
        "local",
        "global",
        "concurrency",
        "key_rate",
        "key_concurrency",
        "key_blocked",
        "key_global",
    ]
    retry_after: Optional[float]

    def __init__(
        self,
        message: str,
        reason: Literal[
            "local",
            "global",
            "concurrency",
            "key_rate",
            "key_concurrency",
            "key_blocked",
            "key_global",
        ],
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after

    def __reduce__(
        self,
    ) -> Tuple[Type["Limited"], Tuple[str, str, Optional[float]], Dict[str, Any]]:
        # BaseException pickles as cls(*args) plus __dict__; args holds only
        # the message, so pass the reason to __init__ explicitly.
        return (type(self), (str(self), self.reason, self.retry_after), self.__dict__)


class FlowctrlError(Exception):
    """Base of every flowctrl error (but not of Limited, which is a decision)."""


class InvalidArgumentError(FlowctrlError, ValueError):
    """An argument is out of range or does not fit the task."""


class InvalidNameError(InvalidArgumentError):
    """A task name is empty, over 63 bytes or not printable."""


class ConfigMismatchError(FlowctrlError, ValueError):
    """The task is registered with another configuration."""


class TableClosedError(FlowctrlError, ValueError):
    """The Table (or the Table of this Task) was closed.

    A ValueError, as for an operation on a closed file.
    """


class TableFullError(FlowctrlError, OSError):
    """Every task slot of the table is taken."""


class TooManyProcessesError(FlowctrlError, OSError):
    """Every attachment slot of the table is held by a live process."""


class IncompatibleTableError(FlowctrlError, OSError):
    """The file is a flowctrl table of another layout version."""


class CorruptTableError(FlowctrlError, OSError):
    """The file is not a flowctrl table, or is truncated or damaged."""


class TablePermissionError(FlowctrlError, PermissionError):
    """The operating system refused access to the table."""


class TableIOError(FlowctrlError, OSError):
    """An I/O error other than a permission problem."""


class FlowctrlTimeoutError(FlowctrlError, TimeoutError):
    """Another process held a claim (a task slot being registered, a
    configuration being written) past the deadline."""


class StoreError(FlowctrlError, ConnectionError):
    """The quota store could not be reached, timed out, or holds something
    that is not quota. Only ``Task.pull_quota`` raises it: decisions fall back
    to local limits instead."""


class InternalError(FlowctrlError, RuntimeError):
    """A bug in flowctrl."""


# Documented and exported as flowctrl.X: name them so, for pickle and repr.
for _cls in (
    Limited,
    FlowctrlError,
    InvalidArgumentError,
    InvalidNameError,
    ConfigMismatchError,
    TableClosedError,
    TableFullError,
    TooManyProcessesError,
    IncompatibleTableError,
    CorruptTableError,
    TablePermissionError,
    TableIOError,
    FlowctrlTimeoutError,
    StoreError,
    InternalError,
):
    _cls.__module__ = "flowctrl"
del _cls
