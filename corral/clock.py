"""The one clock corral's own code reads: timezone-aware UTC, as the store keeps every timestamp."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
