"""The garbage collector's thresholds for `corral serve`.

CPython collects its youngest generation every 700 net container allocations, and the whole heap whenever a
quarter of it is newly promoted. corral serves from a large heap of long-lived objects (every live runner as
last read, each cloud's server listing, each scope's registrations) while each pass and request allocates and
drops thousands more, so with the defaults the collector kept walking old objects: `bench/reconcile.py` at
10,000 runners spent 6.2 s of CPU in collections over a run (2,756 young, 250 middle and 20 full ones, a full
one 0.2 s, each making its pass twice as long as the rest). Collecting the youngest generation every 5,000
allocations lets most of a pass's objects die before they are promoted: 1.6 s over the same run (275 young of
about 4 ms, 13 middle, 1 full), the measured passes 0.20 to 0.23 s with no spike. Every 20,000 saved little
more (1.3 s) for young collections of 15 ms: `bench/reactive.py`'s p99 from a job's arrival to its create
request was 27 and 30 ms with those, against 21 and 23 ms with the defaults (two runs each).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 5_000
"""Net allocations of containers between collections of the youngest generation (CPython's default: 700)."""
MIDDLE_THRESHOLD = 20
"""Young collections between collections of the middle generation (default 10)."""
OLD_THRESHOLD = 10
"""Middle collections before a full one is considered (the default; CPython also waits for a quarter of the
heap to be new)."""


def tune() -> None:
    """Set this process's thresholds for a long-running corral."""
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
