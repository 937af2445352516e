"""The family of services of the overload experiment, and the rows (limiters)
each is run with. See run.py."""

from dataclasses import dataclass

SECONDS = 14.0  # each row's run
SWITCH = 7.0  # the capacity change
TIMEOUT = 1.0  # a request slower than this is released as dropped
BEFORE, AFTER = (2.0, 7.0), (9.0, 14.0)  # "after" starts 2 s after the change

# Every adaptive row gets auto's bounds (min 1, max 1000, initial 4), so no
# reference is held above a small service by a floor of 20.
BOUNDS = {"min_limit": 1, "max_limit": 1000, "initial_limit": 4}
ADAPTIVE = {
    # AIMD with a time-window baseline: a window whose RTT is above 1.5 ×
    # the lowest window RTT of the last 2 s counts as a drop.
    "aimd-2s": "aimd tolerance=1.5 baseline_window=2000",
    "gradient": "gradient",
    "vegas": "vegas",
    "gradient2": "gradient2",
    "auto": "auto",
}


@dataclass(frozen=True)
class Scenario:
    name: str
    slots: int
    ms: float
    rate: float  # offered requests/s, all clients together
    arrivals: str  # "poisson" or "fixed"
    clients: int
    hold_ms: float  # the caller's own time holding the permit
    slots_after: int
    ms_after: float

    def capacity(self, after: bool = False) -> float:
        return (self.slots_after / self.ms_after if after else self.slots / self.ms) * 1000

    def describe(self) -> str:
        change = []
        if self.slots_after != self.slots:
            change.append(f"slots {self.slots} → {self.slots_after}")
        if self.ms_after != self.ms:
            change.append(f"service {self.ms:.0f} → {self.ms_after:.0f} ms")
        return (
            f"{self.slots} slots × {self.ms:.0f} ms (capacity {self.capacity():.0f}/s), "
            f"{self.rate:.0f}/s {self.arrivals} arrivals "
            f"({self.rate / self.capacity():.1f}× capacity, then "
            f"{self.rate / self.capacity(True):.1f}×), {self.clients} client "
            f"process{'es' if self.clients > 1 else ''}, the caller holds each permit "
            f"{self.hold_ms:.0f} ms past the response; at {SWITCH:.0f} s "
            + " and ".join(change)
            + f" (capacity {self.capacity(True):.0f}/s)"
        )

    def rows(self) -> dict[str, dict]:
        """Fixed limits at both slot counts and 1.5, 2 and 4 × the larger,
        then the adaptive rows."""
        big = max(self.slots, self.slots_after)
        values = sorted({self.slots, self.slots_after, round(1.5 * big), 2 * big, 4 * big})
        rows = {f"fixed-{v}": {"max_concurrency": v} for v in values}
        rows.update({n: {"limiter": spec, **BOUNDS} for n, spec in ADAPTIVE.items()})
        return rows


FAMILY = [
    # The published service, at 1.5× then 3× its capacity (it halves).
    Scenario("8x50-halves", 8, 50, 240, "poisson", 1, 0, 8, 100),
    # Wide and slow, 4 processes on one limit, callers holding 5 ms.
    Scenario("32x200-slots-halve", 32, 200, 240, "fixed", 4, 5, 16, 200),
    # Small and fast at 3×, then its capacity doubles.
    Scenario("4x20-doubles", 4, 20, 600, "poisson", 4, 3, 4, 10),
    # One process, callers holding 5 ms, slots double.
    Scenario("16x100-slots-double", 16, 100, 480, "fixed", 1, 5, 32, 100),
    # Four processes without a hold, the service halves its speed.
    Scenario("24x150-halves", 24, 150, 240, "poisson", 4, 0, 24, 300),
]
