"""Types of the values the extension module returns, for annotations.

Plain TypedDicts: they exist at runtime (so stubs and runtime agree) but no
code checks against them.
"""

from typing import TypedDict


class Stats(TypedDict):
    """Task.stats(): counters in permits, summed over the processes."""

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
    """Task.settings: the configuration every process applies now."""

    local_rate: float
    burst: int
    max_concurrency: int
