"""`corral simulate --compare`: two configs on the same trace, side by side, and what differs.

The question a platform team asks is rarely "what does this config do" but "what would this change do":
two `min_idle`s, a schedule, a bigger `max_runners`. Both configs run on the same trace with the same
settings and seed, so every difference in the figures comes from the configs.

What differs between the configs themselves is listed too, key by key, from the settings a simulation reads
(pools, default pool, schedules, tuning...). Credentials, the database and the clouds' connection settings
are left out: the simulation ignores them, and a comparison must never print a secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from corral.config import CorralConfig
from corral.simulate.report import PoolReport, Report, aligned

IGNORED = frozenset({"github", "database_url", "cloud", "clouds", "user_data_template", "runner_version"})
"""Top-level keys the simulation does not read: credentials, where the database is, how to reach clouds."""

MAX_CHANGES_SHOWN = 40
"""Config keys listed in the table at most (the JSON lists them all)."""


@dataclass(frozen=True)
class Change:
    """One config key whose value differs (`None` on one side: the key is not there)."""

    key: str
    base: Any
    other: Any


@dataclass(frozen=True)
class Comparison:
    """Two simulations of one trace: the base config's report, the other's, and the keys that differ."""

    base_name: str
    other_name: str
    base: Report
    other: Report
    changes: list[Change]

    def as_dict(self) -> dict[str, object]:
        """The JSON `--compare --format json` prints: both reports whole, the changed keys, and per pool of
        both the other's figures minus the base's."""
        return {
            "base": {"config": self.base_name, **self.base.as_dict()},
            "compare": {"config": self.other_name, **self.other.as_dict()},
            "changed": [{"key": change.key, "base": change.base, "compare": change.other} for change in self.changes],
            "difference": {
                name: _difference(self.base.pools[name], self.other.pools[name])
                for name in self.base.pools
                if name in self.other.pools
            },
        }

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def as_table(self) -> str:
        """A line per figure of each pool: the base's value, the other's, and the change where there is one."""
        rows: list[tuple[str, ...]] = [("pool", "figure", self.base_name, self.other_name, "change")]
        for name in _pool_names(self.base, self.other):
            first = True
            for figure, base, other, change in _figures(self.base.pools.get(name), self.other.pools.get(name)):
                rows.append((name if first else "", figure, base, other, change))
                first = False
        lines = aligned(rows, left=2)
        lines.append(
            f"{self.base.jobs} jobs, {self.base.unmatched} unmatched with {self.base_name}, "
            f"{self.other.unmatched} with {self.other_name}; {self.base.as_dict()['measured_hours']:g} h measured"
        )
        if self.changes:
            lines.append(f"what differs ({self.base_name} -> {self.other_name}):")
            lines.extend(
                f"  {change.key}: {_shown(change.base)} -> {_shown(change.other)}"
                for change in self.changes[:MAX_CHANGES_SHOWN]
            )
            if len(self.changes) > MAX_CHANGES_SHOWN:
                lines.append(f"  ... and {len(self.changes) - MAX_CHANGES_SHOWN} more (--format json lists them all)")
        else:
            lines.append("the configs do not differ in anything the simulation reads")
        return "\n".join(lines) + "\n"


def changed_keys(base: CorralConfig, other: CorralConfig) -> list[Change]:
    """Dotted keys (`pools.small.min_idle`) whose values differ, in the base's order then the other's."""
    flat_base = dict(_flatten(_simulated(base)))
    flat_other = dict(_flatten(_simulated(other)))
    keys = list(flat_base) + [key for key in flat_other if key not in flat_base]
    return [
        Change(key, flat_base.get(key), flat_other.get(key))
        for key in keys
        if flat_base.get(key) != flat_other.get(key)
    ]


def _simulated(config: CorralConfig) -> dict[str, Any]:
    return config.model_dump(mode="json", exclude=set(IGNORED))


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Leaves of nested mappings as (dotted key, value); lists are leaves (a label set is one value)."""
    if isinstance(value, dict) and value:
        for key, inner in value.items():
            yield from _flatten(inner, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value


def _pool_names(base: Report, other: Report) -> list[str]:
    return list(base.pools) + [name for name in other.pools if name not in base.pools]


def _figures(base: PoolReport | None, other: PoolReport | None) -> Iterator[tuple[str, str, str, str]]:
    """(figure, base, other, change) for each figure of the table; `-` where a side has no such pool or wait."""
    for figure, read, unit in _FIGURES:
        before, after = (read(pool) if pool is not None else None for pool in (base, other))
        change = "" if before is None or after is None or before == after else _signed(after - before, unit)
        yield figure, _value(before, unit), _value(after, unit), change


def _wait(percentile: str) -> Any:
    def read(pool: PoolReport) -> float | None:
        return None if pool.wait_s is None else float(getattr(pool.wait_s, percentile))

    return read


def _hours(kind: str) -> Any:
    def read(pool: PoolReport) -> float:
        return pool.runner_time.hours()[kind]

    return read


_FIGURES: tuple[tuple[str, Any, str], ...] = (
    ("jobs", lambda pool: pool.jobs, ""),
    ("served", lambda pool: pool.served, ""),
    ("wait p50", _wait("p50"), "s"),
    ("wait p95", _wait("p95"), "s"),
    ("wait p99", _wait("p99"), "s"),
    ("wait max", _wait("max"), "s"),
    ("busy h", _hours("busy"), ""),
    ("idle h", _hours("idle"), ""),
    ("booting h", _hours("booting"), ""),
    ("peak servers", lambda pool: pool.peak_servers, ""),
)
"""The table's figures: name, how to read it off a pool's report, and its unit."""


def _difference(base: PoolReport, other: PoolReport) -> dict[str, object]:
    """The other's figures minus the base's (waits: None when either side served no job)."""

    def waits() -> dict[str, float] | None:
        if base.wait_s is None or other.wait_s is None:
            return None
        return {key: round(value - getattr(base.wait_s, key), 2) + 0.0 for key, value in vars(other.wait_s).items()}

    before, after = base.runner_time.hours(), other.runner_time.hours()
    return {
        "served": other.served - base.served,
        "wait_s": waits(),
        "runner_hours": {kind: round(after[kind] - before[kind], 3) + 0.0 for kind in before},
        "peak_servers": other.peak_servers - base.peak_servers,
    }


def _value(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:g}{unit}"


def _signed(value: float, unit: str) -> str:
    return f"{round(value, 3) + 0.0:+g}{unit}"


def _shown(value: Any) -> str:
    return "(not set)" if value is None else json.dumps(value)
