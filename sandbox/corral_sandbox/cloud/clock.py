"""Time as the services print it: each service has its own timestamp format and clients parse them."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    return datetime.now(UTC)


def iso_z(moment: datetime) -> str:
    """Nova's, Glance's and Neutron's shape: `2026-01-01T00:00:00Z`."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_micro(moment: datetime) -> str:
    """Cinder's and Nova's `launched_at` shape: microseconds, no zone."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")


def parse_iso(text: str) -> datetime | None:
    """Read the ISO 8601 times clients send (`changes-since`); None when it is not one."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
