"""What `corral doctor` finds: one `Check` per item, each with its level and, when it is not a pass, the fix.

Levels, and why there are four:

- `pass`: the item is as corral needs it.
- `warn`: corral will run, but less well than the configuration promises (fewer than `max_runners` fit in
  the quota headroom, a fine-grained token whose permissions GitHub does not disclose, failed deliveries
  that a redelivery later fixed). A warning does not fail the run: it is no reason to refuse a setup that
  works, and a CI gate on `corral doctor` must not flap on how busy the cloud is today.
- `fail`: corral would not work as configured (it could not create a server, register a runner or hear
  about a job). Any failure makes the exit code 1.
- `skipped`: the item could not be looked at because something it depends on failed (every pool check
  after Keystone refused the credentials), or it does not apply (an App's hook with token auth). It names
  the reason, and never fails the run on its own: the failure it depends on already does.

Every text a check carries passes through `corral.secrets.redact` when it is made, so no renderer can
print a credential even if a far end echoed one back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import StrEnum

from corral import secrets


class Level(StrEnum):
    PASS = "pass"  # noqa: S105 (a level, not a password)
    WARN = "warn"
    FAIL = "fail"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Check:
    """One item: `section` (cloud, github, database), `name` (`pool small: image`), what was found, the fix."""

    section: str
    name: str
    level: Level
    detail: str
    fix: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "detail", secrets.redact(self.detail))
        if self.fix is not None:
            object.__setattr__(self, "fix", secrets.redact(self.fix))

    def as_dict(self) -> dict[str, str | None]:
        return {
            "section": self.section,
            "item": self.name,
            "status": str(self.level),
            "detail": self.detail,
            "fix": self.fix,
        }


@dataclass
class Section:
    """The checks of one section, appended as they finish, so a section cut off by its deadline still
    reports what it had found by then. Safe to append to from the section's own thread."""

    name: str
    checks: list[Check] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, level: Level, detail: str, fix: str | None = None) -> Check:
        check = Check(self.name, name, level, detail, fix)
        with self._lock:
            self.checks.append(check)
        return check

    def passed(self, name: str, detail: str) -> Check:
        return self.add(name, Level.PASS, detail)

    def warned(self, name: str, detail: str, fix: str) -> Check:
        return self.add(name, Level.WARN, detail, fix)

    def failed(self, name: str, detail: str, fix: str) -> Check:
        return self.add(name, Level.FAIL, detail, fix)

    def skipped(self, name: str, reason: str) -> Check:
        return self.add(name, Level.SKIPPED, reason)

    def snapshot(self) -> list[Check]:
        with self._lock:
            return list(self.checks)


@dataclass(frozen=True)
class Report:
    config: str
    checks: list[Check]

    def count(self, level: Level) -> int:
        return sum(1 for check in self.checks if check.level is level)

    @property
    def ok(self) -> bool:
        return self.count(Level.FAIL) == 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1
