"""Time as GitHub prints it. Kept here rather than imported from `world`, which imports this package."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def isoformat(moment: datetime | None) -> str | None:
    """GitHub's timestamp shape: second precision with a `Z`."""
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
