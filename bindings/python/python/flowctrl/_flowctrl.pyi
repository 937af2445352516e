from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Literal, Optional, TypedDict, Union

__version__: str
LAYOUT_VERSION: int

Outcome = Literal["success", "dropped", "ignored"]

class Stats(TypedDict):
    admitted: int
    limited_local: int
    limited_global: int
    limited_concurrency: int
    released_success: int
    released_dropped: int
    released_ignored: int
    reclaimed: int
    in_flight: int
    rtt_sum_ns: int
    rtt_samples: int

class Settings(TypedDict):
    local_rate: float
    burst: int
    max_concurrency: int

class FlowctrlError(Exception): ...

class Limited(FlowctrlError):
    reason: Literal["local", "global", "concurrency"]

class InvalidArgumentError(FlowctrlError): ...
class InvalidNameError(InvalidArgumentError): ...
class TableFullError(FlowctrlError): ...
class TooManyProcessesError(FlowctrlError): ...
class ConfigMismatchError(FlowctrlError): ...
class IncompatibleTableError(FlowctrlError): ...
class CorruptTableError(FlowctrlError): ...
class TablePermissionError(FlowctrlError): ...
class TableIOError(FlowctrlError): ...
class InternalError(FlowctrlError): ...

class Table:
    """A shared-memory task table; created if missing (mode 0600 by default).

    ``path`` None means /dev/shm/flowctrl; a bare name means /dev/shm/<name>.
    ``capacity``, ``mode`` and ``max_processes`` apply only to a new table.
    """

    def __init__(
        self,
        path: Optional[Union[str, PathLike[str]]] = None,
        *,
        capacity: int = 1024,
        mode: int = 0o600,
        max_processes: int = 128,
    ) -> None: ...
    def task(
        self,
        name: str,
        *,
        local_rate: Optional[float] = None,
        burst: Optional[int] = None,
        max_concurrency: Optional[int] = None,
    ) -> Task:
        """Registers a task host-wide, or attaches to it.

        The first registration wins; naming a different value for a field
        raises ConfigMismatchError (fields left None are not compared).
        """
    @property
    def path(self) -> Path: ...
    @property
    def capacity(self) -> int: ...
    @property
    def max_processes(self) -> int: ...
    def reap(self) -> bool: ...

class Task:
    def try_acquire(self, n: int = 1) -> Optional[Permit]: ...
    def acquire(self, n: int = 1) -> Permit:
        """Returns a Permit (usable as a context manager) or raises Limited."""
    def update(
        self,
        *,
        local_rate: Optional[float] = None,
        burst: Optional[int] = None,
        max_concurrency: Optional[int] = None,
    ) -> None: ...
    def stats(self) -> Stats: ...
    def stats_by_process(self) -> dict[int, Stats]: ...
    @property
    def name(self) -> str: ...
    @property
    def settings(self) -> Settings: ...

class Permit:
    def release(self, outcome: Outcome = "success") -> None: ...
    @property
    def n(self) -> int: ...
    @property
    def released(self) -> bool: ...
    def __enter__(self) -> Permit: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
