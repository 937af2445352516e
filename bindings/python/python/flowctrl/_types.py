"""Types of the values the extension module returns, for annotations.

Plain TypedDicts: they exist at runtime (so stubs and runtime agree) but no
code checks against them.
"""

from typing import Literal, Optional, TypedDict, Union


class Counters(TypedDict):
    """The decision and release counters, in permits."""

    admitted: int
    limited_local: int
    limited_global: int
    limited_concurrency: int
    released_success: int
    released_dropped: int
    released_ignored: int
    reclaimed: int
    in_flight: int
    held: int
    rtt_sum_ns: int
    rtt_samples: int
    limit: int
    baseline_rtt_ns: int
    recent_rtt_ns: int
    waiting: int
    unlaned: int
    unlaned_refused: int


class Stats(Counters):
    """Task.stats(): counters summed over the processes, and what the global
    quota did on this host (``quota_state`` None: no global limit)."""

    quota_state: Optional[Literal["open", "limited", "failed"]]
    pulls: int
    failed_pulls: int
    pull_ns_sum: int
    pull_ns_max: int
    quota_granted: int
    quota_stranded: int
    open_ms: int
    limited_ms: int
    failed_ms: int
    limited_fallback: int
    hosts_seen: int
    host_conflicts: int
    config_conflicts: int
    keys_created: int
    quota_shards_down: int
    quota_reserved: int
    quota_returned: int
    clock_offset_us: int


class ProcessStats(Counters):
    """Task.stats_by_process(): one attachment's counters since it attached."""

    pid: int
    slot: int


class Consistency(TypedDict):
    """Task.check(): the concurrency count against the ledgers, at one instant."""

    in_flight: int
    held: int
    drift: int


class TableCheck(TypedDict):
    """Table.check(): what is wrong with the table, if anything."""

    replaced: bool
    drift: dict[str, int]
    unchecked: list[str]


class Settings(TypedDict):
    """Task.settings: the configuration every process applies now."""

    local_rate: float
    burst: int
    max_concurrency: int
    wait_order: Literal["fifo", "lifo"]
    barging: bool
    global_rate: float
    slice_ms: int
    chunk: int
    fallback: Union[str, float]
    fallback_rate: float
    global_burst: int
    shards: int
    global_source: Literal["local", "store"]
    limiter: str
    min_limit: int
    max_limit: int
    initial_limit: int


class BackendStats(TypedDict):
    """Balancer.stats(): one backend, host-wide (durations in seconds)."""

    index: int
    weight: int
    active: bool
    in_flight: int
    picked: int
    rtt: float
    recent_successes: int
    recent_failures: int
    ejected_for: float
    ejections: int
    """Ejections in a row (0 once it answers again)."""
    successes: int
    """Counters since it joined, as flowctrl_backend_*_total exports them."""
    failures: int
    ejections_total: int
    age: float
    ramp: float
    load: Optional[float]


class StoredTask(TypedDict):
    """Store.task(): a task's record in the store, which every host spends
    by while it exists."""

    version: int
    global_rate: float
    slice_ms: int
    chunk: int
    fallback: Union[str, float]
    global_burst: int
    shards: int


class HostRecord(TypedDict):
    """One host of Store.fleet(): its record in the newest full slice it
    pulled in."""

    host: str
    slice: int
    asked: int
    granted: int
    claimed: int
    offset_us: int
    demand: int
    # What its releases reported over the slice: successes, drops, and the
    # mean and p99 round-trip in µs (0: no samples).
    success: int
    dropped: int
    mean_us: int
    p99_us: int
    # Its own threshold per slice when it does not spend by the store
    # record (0: it does; None: it does not say).
    own_quota: Optional[int]


class Fleet(TypedDict):
    """Store.fleet(): the live hosts of a task."""

    task: str
    slice_ms: int
    slice: int
    quota: Optional[int]
    hosts: list[HostRecord]


class KeyGlobalFields(TypedDict):
    """A key's global rate in Store.key_record() (all None: none), as
    Store.set_key_record takes it."""

    key_global: Optional[str]
    key_global_slice: Optional[str]
    key_global_local: Optional[int]
    key_global_fallback: Optional[str]


class StoredKeys(KeyGlobalFields):
    """Store.key_record(): a keyed task's record of its keys' global rates
    (the default's fields, and each named key's), which every host adopts."""

    version: int
    overrides: dict[str, KeyGlobalFields]


class HotKey(TypedDict):
    """One of Store.hot_keys()'s keys: its id in the store, its first bytes
    if a host named it, what the slice gave of it and the asks for it."""

    id: int
    name: Optional[bytes]
    given: int
    asks: int


class HotKeys(TypedDict):
    """Store.hot_keys(): the keys the store gave most of in its current
    slice, most first, and how many keys it counts in it."""

    slice_ms: int
    slice: int
    keys: int
    top: list[HotKey]
