"""The one error `corral init` reports: what it could not decide or use, and the flag or fix that settles it."""

from __future__ import annotations


class InitError(Exception):
    """init cannot go on; the message names the flag to pass (or the fix), never a secret."""
