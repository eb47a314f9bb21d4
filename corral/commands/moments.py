"""When a command's `--since`/`--until` mean: an ISO 8601 time, or a duration back from now (`24h`, `7d`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from corral.config import parse_duration


def moment(text: str, option: str) -> str:
    """For `corral usage`, which hands it to the API: an ISO 8601 time as given, or a duration back from now as an
    ISO time; SystemExit otherwise."""
    try:
        return (datetime.now(UTC) - timedelta(seconds=parse_duration(text))).isoformat()
    except ValueError:
        pass
    _iso_or_exit(text, option, "usage")
    return text


def since_when(text: str, option: str, command: str) -> datetime:
    """`moment` as an aware datetime for a command that reads the store itself (a time without a zone is UTC,
    as the API takes it); SystemExit naming `command` and `option` otherwise."""
    try:
        return datetime.now(UTC) - timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    parsed = _iso_or_exit(text, option, command)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def _iso_or_exit(text: str, option: str, command: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise SystemExit(
            f"corral {command}: {option} {text[:60]!r} is neither an ISO 8601 time (2026-12-01T00:00:00Z) nor a "
            "duration back from now (24h, 7d)"
        ) from None
