# The extension module. The exceptions it raises are defined in
# flowctrl/_errors.py, the dict types it returns in flowctrl/_types.py.
from os import PathLike
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Literal, Sequence, final

from ._aio import AsyncAcquire
from ._types import (
    BackendStats,
    Consistency,
    Fleet,
    HotKeys,
    KeyGlobalFields,
    ProcessStats,
    Settings,
    Stats,
    StoredKeys,
    StoredTask,
    TableCheck,
)

__all__ = [
    "Table",
    "Task",
    "Permit",
    "_Waiter",
    "Balancer",
    "Choice",
    "Store",
    "__version__",
    "LAYOUT_VERSION",
    "NO_CAP",
]

__version__: str
LAYOUT_VERSION: int
NO_CAP: int
"""``max_concurrency = NO_CAP`` removes a cap (0 is refused: it would admit
nothing)."""

@final
class Table:
    """A shared-memory task table; created if missing (mode 0600 by default).

    ``path`` None means /dev/shm/flowctrl; a bare name means /dev/shm/<name>.
    Every argument left None takes the library's default (256 tasks, 64
    processes, 16 balancers of 32 backends, mode 0600, not shared).
    ``capacity``, ``mode`` and ``max_processes`` apply only to a new table.
    An existing table is opened only if it is a regular file (not a symlink)
    owned by ``owner`` (default: this process's effective uid) and, unless
    ``shared``, not writable by group or others: whoever can write the file
    sets everyone's limits (TablePermissionError otherwise).

    ``store`` is where global quota comes from: ``"redis://host:port/db"``
    (``rediss://`` for TLS, credentials in the URL), a master its Sentinels
    name (``"redis+sentinel://host:port,host:port/master"``), a Redis Cluster
    (``"redis+cluster://host:port,host:port"``; ``rediss+sentinel://`` and
    ``rediss+cluster://`` for TLS) or None for the embedded store (the table
    itself: one host, no server). ``store_timeout`` (default
    5 ms), ``store_connect_timeout`` (20 ms) and ``probe_interval`` (3 s) are
    in seconds; a request to the store, connect and every byte of the reply
    included, ends within ``store_connect_timeout + store_timeout``
    (however slowly the server answers). Every process of a host must name
    the same store.
    ``host_id`` names this host in the store's census (default: from
    /etc/machine-id and the table's path).

    ``config`` is a TOML config file (default: the one ``FLOWCTRL_CONFIG``
    names, if any): its ``[table]`` section wins over these arguments and
    its tasks' fields over those given to ``task()``; an edit of the file is
    applied host-wide within a second.

    ``lanes`` (default 0: every task and process pair has its own ledger
    lanes, as 0.3 laid them out) makes a new table's lanes a pool of that
    many sets, taken on a process's first use of a task and given back when
    it dies: the file grows with use, not with tasks × processes. With the
    pool empty, a process still decides rate and global limits; its acquires
    of a capped task are refused as concurrency. Both show in the stats'
    ``unlaned`` and ``unlaned_refused``; ``lane_pool()`` says how full it is.

    ``close()``, or leaving a ``with`` block, drops this handle: the table and
    every Task made from it then raise TableClosedError (``path``,
    ``capacity``, ``max_processes`` and ``closed`` stay readable). Permits
    already taken can still be released. The process detaches from the
    table once no Task or Permit of it is left.
    """

    def __new__(
        cls,
        path: str | PathLike[str] | None = None,
        *,
        capacity: int | None = None,
        mode: int | None = None,
        max_processes: int | None = None,
        owner: int | None = None,
        shared: bool | None = None,
        balancers: int | None = None,
        backends_per_balancer: int | None = None,
        store: str | None = None,
        key_prefix: str | None = None,
        store_timeout: float | None = None,
        store_connect_timeout: float | None = None,
        probe_interval: float | None = None,
        host_id: str | None = None,
        config: str | PathLike[str] | None = None,
        lanes: int | None = None,
    ) -> Table: ...
    def lane_pool(self) -> tuple[int, int] | None:
        """(sets in use, sets) of a table made with ``lanes``, else None."""
        ...
    def task(
        self,
        name: str,
        *,
        local_rate: float | None = None,
        burst: int | None = None,
        max_concurrency: int | None = None,
        wait_order: Literal["fifo", "lifo"] | None = None,
        barging: bool | None = None,
        global_rate: float | None = None,
        slice_ms: int | None = None,
        chunk: int | None = None,
        fallback: str | float | None = None,
        fallback_rate: float | None = None,
        global_burst: int | None = None,
        shards: int | None = None,
        limiter: str | None = None,
        min_limit: int | None = None,
        max_limit: int | None = None,
        initial_limit: int | None = None,
    ) -> Task:
        """Registers a task host-wide, or attaches to it.

        The first registration wins; naming a different value for a field
        raises ConfigMismatchError (fields left None are not compared).
        ``limiter`` is a spec such as "auto" or "gradient2 tolerance=2".
        ``fallback`` is what the host admits while the store fails: "share"
        (the default: its own share of the global rate), "local" (its local
        limits), "deny", or a rate for this host (``fallback_rate`` is the
        older spelling of a rate). ``global_burst`` is what a slice releases
        at once (0: 250 ms of ``global_rate``); the rest evenly over it.
        ``shards`` (1..6) spreads each slice's quota over that many store
        keys of their own hash tags (a hot task on a Redis Cluster); every
        host of the task must agree: set it in the store record.
        """
    def balancer(
        self,
        name: str,
        backends: Sequence[str],
        weights: Sequence[int] | None = None,
        *,
        decay: float | None = None,
        failure_penalty: float | None = None,
        slow_start: float | None = None,
        default_rtt: float | None = None,
        retry_ratio: float | None = None,
        retry_min_per_sec: float | None = None,
    ) -> Balancer:
        """Registers the balancer host-wide (or attaches to it) and sets its backends.

        Durations are in seconds; arguments left None take the library's
        defaults (decay 10 s, failure_penalty 5 s, slow_start 30 s,
        default_rtt 0.1 s, retry_ratio 0.2, retry_min_per_sec 10). Every
        process must pass the same configuration (ConfigMismatchError
        otherwise).
        """
    def reap(self) -> int:
        """Looks for dead processes now; the number found (their permits are back)."""
    def check(self) -> TableCheck:
        """Whether the path still names this table, and tasks whose count drifted."""
    def close(self) -> None:
        """Drops this handle; idempotent. Later use raises TableClosedError."""
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> Path: ...
    @property
    def capacity(self) -> int: ...
    @property
    def max_processes(self) -> int: ...
    def __enter__(self) -> Table:
        """Returns the table; raises TableClosedError if it is closed."""
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Closes the table."""

@final
class _Waiter:
    """One waiting acquire of ``acquire_async`` (driven by ``flowctrl._aio``)."""

    def poll(self, wake: Callable[[], object]) -> Permit | None: ...
    def close(self) -> None: ...

@final
class Task:
    """A task registered in a table. Made by Table.task().

    Every method but ``name`` raises TableClosedError once its Table is
    closed.
    """

    def try_acquire(self, n: int = 1, *, key: str | bytes | None = None) -> Permit | None:
        """Returns a Permit, or None when a limit rejects the request. The
        GIL is kept (cheaper) unless the acquire may pull global quota from
        the store, which other threads then do not wait out. With ``key``,
        the key's limits of a keyed task apply too."""
        ...
    def _may_pull(self, n: int = 1) -> bool: ...
    def _may_pull_key(self, n: int = 1) -> bool: ...
    def _waiter(self, n: int = 1, timeout: float | None = None) -> _Waiter: ...
    def acquire(
        self, n: int = 1, timeout: float | None = None, *, key: str | bytes | None = None
    ) -> Permit:
        """Returns a Permit (usable as a context manager) or raises Limited.

        With ``timeout`` (seconds), waits up to it for a permit, without
        the GIL; None does not wait.
        """
    def acquire_async(
        self, n: int = 1, timeout: float | None = None, *, key: str | bytes | None = None
    ) -> AsyncAcquire:
        """``async with`` (or ``await``) it for a Permit; waits up to
        ``timeout`` seconds without blocking the event loop."""
    def set_keys(
        self,
        rates: str | None = None,
        *,
        max_concurrency: int | None = None,
        capacity: int = 65536,
        shadow: bool = False,
        overflow: str = "shared",
        key_global: str | None = None,
        key_global_slice: float | str | None = None,
        key_global_local: int | None = None,
        key_global_fallback: str | None = None,
    ) -> None:
        """Gives the task limits per caller: rates like "10/second;1000/hour",
        a per-key max_concurrency (None or NO_CAP: none; 0 is refused),
        capacity keys, shadow mode, overflow "shared" or "admit", and a
        rate across the fleet: key_global
        ("1000/hour"), key_global_slice (seconds or "1m"; default the
        rate's period), key_global_local (default 1), key_global_fallback
        ("share", "local" or "deny"). Each call sets them all."""
    def set_key_override(
        self,
        key: str | bytes,
        rates: str | None = None,
        *,
        max_concurrency: int | None = None,
        unlimited: bool = False,
        blocked: bool = False,
        shadow: bool = False,
        key_global: str | None = None,
        key_global_slice: float | str | None = None,
        key_global_local: int | None = None,
        key_global_fallback: str | None = None,
    ) -> None:
        """Gives ``key`` limits of its own, live (the arguments of
        set_keys, none taken from the task's)."""
    def remove_key_override(self, key: str | bytes) -> None:
        """Takes ``key``'s override away."""
    def key_state(self, key: str | bytes) -> dict[str, Any]:
        """The key's state, spending nothing: limit, remaining, reset_after,
        retry_after (seconds) of its rates on the host (not its global
        rate: its slice is the fleet's), in_flight, max_concurrency,
        present, overridden, blocked, unlimited."""
    def key_stats(self) -> dict[str, int] | None:
        """The key file's counters, with ``record`` and ``record_refused``:
        the versions of the store's record of the keys' global rates in
        force and last refused (0: none); None without key limits."""
    @property
    def limit(self) -> int | None:
        """The concurrency limit applied now; None when there is no cap."""
    def update(
        self,
        *,
        local_rate: float | None = None,
        burst: int | None = None,
        max_concurrency: int | None = None,
        wait_order: Literal["fifo", "lifo"] | None = None,
        barging: bool | None = None,
        global_rate: float | None = None,
        slice_ms: int | None = None,
        chunk: int | None = None,
        fallback: str | float | None = None,
        fallback_rate: float | None = None,
        global_burst: int | None = None,
        shards: int | None = None,
        limiter: str | None = None,
        min_limit: int | None = None,
        max_limit: int | None = None,
        initial_limit: int | None = None,
    ) -> None:
        """Changes the given fields of the configuration for the whole host."""
    def stats(self) -> Stats: ...
    def pull_quota(self, want: int) -> int:
        """Pulls up to ``want`` permits of the current slice into the host's
        quota now; returns how many were granted (0: the slice is exhausted).
        Raises StoreError when the store failed."""
    def stats_by_process(self) -> list[ProcessStats]:
        """Statistics of each attachment live now, with its pid and slot."""
    def check(self) -> Consistency:
        """The concurrency count against every process's ledger, at one instant."""
    @property
    def name(self) -> str: ...
    @property
    def settings(self) -> Settings: ...

@final
class Permit:
    """Admission for ``n`` permits. Release it once.

    As a context manager it is released on exit (unless released already):
    as "dropped" if the block raised, else "success". A permit collected
    unreleased is released as "ignored". Releasing it twice, from any thread,
    raises InvalidArgumentError; a release that failed leaves it unreleased.
    """

    def release(
        self,
        outcome: Literal["success", "dropped", "ignored"] = "success",
        *,
        rtt: float | None = None,
    ) -> None:
        """Releases the permit with how the request ended.

        Raises InvalidArgumentError if it was released already, or if the
        release is refused (a permit inherited across fork, for one); a
        refused release leaves the permit unreleased.
        """
    @property
    def n(self) -> int: ...
    @property
    def released(self) -> bool: ...
    def __enter__(self) -> Permit: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

@final
class Balancer:
    """A set of backends shared by every process on the host. Made by Table.balancer()."""

    def pick(self, exclude: Sequence[str] | None = None) -> Choice:
        """Chooses a backend, avoiding the addresses in ``exclude``.

        Raises InvalidArgumentError when every backend is excluded.
        """
    def set_backends(
        self, backends: Sequence[str], weights: Sequence[int] | None = None
    ) -> None:
        """Replaces the backends; those that stay keep their statistics."""
    def retry_allowed(self) -> bool:
        """Whether the host-wide retry budget allows a retry now (it is then counted)."""
    def stats(self) -> dict[str, BackendStats]:
        """Statistics of every backend (active and removed), by address."""
    @property
    def name(self) -> str: ...

@final
class Choice:
    """A chosen backend. Release it once.

    As a context manager it is released on exit (unless released already):
    as "dropped" (a failure) if the block raised, else "success". A choice
    collected unreleased is released as "ignored".
    """

    def release(
        self,
        outcome: Literal["success", "dropped", "ignored"] = "success",
        *,
        rtt: float | None = None,
        load: float | None = None,
    ) -> None:
        """Records how the call ended; ``rtt`` (seconds) overrides the measured
        time, ``load`` is the server's reported load (0..1)."""
    @property
    def backend(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def released(self) -> bool: ...
    def __enter__(self) -> Choice: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...


@final
class Store:
    """A fleet's quota store (Redis), apart from any table: reads the census
    every pull records in a slice's key, and keeps the tasks' records whose
    global numbers win over every host's own."""

    def __new__(
        cls,
        url: str,
        *,
        key_prefix: str | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
    ) -> Store: ...
    def fleet(self, task: str, *, slice_ms: int | None = None) -> Fleet:
        """The live hosts of ``task``: those that pulled in its last full
        slices, with what each asked, was granted and claimed (grants and
        fallback admissions) and its clock offset (µs). ``slice_ms`` None:
        the task's record's, else 1000."""
        ...
    def set_task(
        self,
        task: str,
        *,
        global_rate: float,
        slice_ms: int | None = None,
        chunk: int | None = None,
        fallback: str | float | None = None,
        global_burst: int | None = None,
        shards: int | None = None,
    ) -> int:
        """Writes ``task``'s record: every host spends by these numbers from
        its next pull (within one slice) until ``remove_task``; None fields
        take their defaults. Returns the record's version."""
        ...
    def task(self, task: str) -> StoredTask | None:
        """``task``'s record, or None; ValueError names a bad field of a
        record written by hand."""
        ...
    def remove_task(self, task: str) -> bool:
        """Removes ``task``'s record (hosts return to their own numbers at
        their next pull); whether there was one."""
        ...
    def set_key_record(
        self,
        task: str,
        *,
        key_global: str | None = None,
        key_global_slice: float | str | None = None,
        key_global_local: int | None = None,
        key_global_fallback: str | None = None,
        overrides: dict[str | bytes, KeyGlobalFields | dict[str, Any] | None] | None = None,
    ) -> int:
        """Writes keyed task ``task``'s record of its keys' global rates,
        which every host adopts within about a second: the ``key_global*``
        fields (as Task.set_keys's) for every key not named, ``overrides``
        a dict of them (or None: no rate) per key. Returns its version."""
        ...
    def key_record(self, task: str) -> StoredKeys | None:
        """``task``'s record of its keys' global rates, or None; ValueError
        names a bad field of a record written by hand."""
        ...
    def remove_key_record(self, task: str) -> bool:
        """Removes ``task``'s record of its keys' global rates (hosts keep
        its rates until their own are written again); whether there was
        one."""
        ...
    def hot_keys(self, task: str, *, slice_ms: int = 1000, top: int = 10) -> HotKeys:
        """The ``top`` keys (at most 100) of keyed task ``task`` the store
        gave most of in its current slice of ``slice_ms``, most first."""
        ...
