"""Every secret this process has seen, and `redact`, which blanks them out of text bound for a log.

Careful logging is the first defence (corral never logs a secret on purpose, and the HTTP libraries are
kept from logging bodies); this is the net under it. The configuration registers its credentials when it
is loaded, the GitHub client registers each JIT config the moment it arrives, and corral's log handler
passes every line through `redact`. A JIT config travels to the cloud inside base64-encoded user data, so
its base64 forms are registered too. Token shapes (GitHub's, corral's API tokens, JWTs) and long base64
runs are blanked even when nobody registered them: no log line needs them to be readable.
"""

from __future__ import annotations

import base64
import bisect
import re
import threading
from collections import deque

REDACTED = "***"
MIN_SECRET_LENGTH = 8
"""Shorter values are not registered: blanking every `admin` or `1234` would garble the log, and the
configuration refuses credentials this short anyway."""
MAX_JIT_CONFIGS = 512
"""JIT configs are single use and a runner boots within minutes, so the last few hundred cover every one
still booting; each costs ~20 KB with its base64 forms. An older one is still caught, whole, by the
long-base64 rule below."""
TOKEN_SHAPES = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"  # GitHub tokens
    r"|(?<=\bcorral_[0-9a-f]{8}_)[A-Za-z0-9_-]{20,}"  # corral API tokens: the id before it stays readable
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWTs (the App's, bearer tokens)
    r"|(?<=[?&]token=)[^&\s\"']+"  # a token in a URL's query (refused with 400, but an access log still records it)
    r"|[A-Za-z0-9+/]{100,}={0,2}"  # kilobytes of base64: user data, a JIT config, a key
)


def base64_forms(secret: str) -> list[str]:
    """The stretches of base64 that appear wherever `secret` is base64-encoded inside a longer text.

    Base64 maps 3 bytes to 4 characters, so how `secret` encodes depends on its offset modulo 3 in the
    surrounding text; for each offset, the characters that depend on the neighbours are dropped.
    """
    raw = secret.encode()
    forms = []
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode("ascii")
        start = 4 if shift else 0
        end = len(encoded) - (4 if (shift + len(raw)) % 3 else 0)
        if end - start >= MIN_SECRET_LENGTH:
            forms.append(encoded[start:end])
    return forms


class SecretRegistry:
    """Strings to blank out; kept sorted by length so a short log line skips every longer secret at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lengths: list[int] = []
        self._values: list[str] = []
        """Sorted by length; may still hold forgotten values (in no `_known`) until the next compaction."""
        self._known: set[str] = set()
        """The values held, for the membership test: a JIT config's forms share their length with hundreds
        of others."""
        self._forgotten = 0
        self._jit: deque[list[str]] = deque()

    def __len__(self) -> int:
        """How many strings are blanked: bounded, however many JIT configs came and went."""
        return len(self._known)

    def register(self, value: str | None) -> None:
        """Blank `value` (and any line of it, for multi-line secrets such as a PEM key) from now on."""
        if not value:
            return
        for text in {value.strip(), *value.strip().splitlines()}:
            self._add(text.strip())

    def register_encoded(self, value: str) -> None:
        """A JIT config: blank it and its base64 forms (user data); the oldest are forgotten after a while."""
        forms = [value, *base64_forms(value)]
        with self._lock:
            self._jit.append(forms)
            expired = self._jit.popleft() if len(self._jit) > MAX_JIT_CONFIGS else []
        for form in forms:
            self._add(form)
        for form in expired:
            self._forget(form)

    def _add(self, value: str) -> None:
        if len(value) < MIN_SECRET_LENGTH:
            return
        with self._lock:
            if value in self._known:
                return
            self._known.add(value)
            index = bisect.bisect_left(self._lengths, len(value))
            self._lengths.insert(index, len(value))
            self._values.insert(index, value)

    def _forget(self, value: str) -> None:
        """Forget `value`, lazily: finding it among hundreds of forms of the same length compares kilobytes
        each (3% of corral's CPU per job when done at once), so the lists are compacted in one sweep once a
        quarter of them is forgotten, which bounds both the memory and the cost per value."""
        with self._lock:
            if value not in self._known:
                return
            self._known.discard(value)
            self._forgotten += 1
            if self._forgotten * 4 > len(self._values):
                self._compact()

    def _compact(self) -> None:
        kept, seen = [], set()
        for value in self._values:
            if value in self._known and value not in seen:
                seen.add(value)
                kept.append(value)
        self._values = kept
        self._lengths = [len(value) for value in kept]
        self._forgotten = 0

    def redact(self, text: str) -> str:
        """`text` with every registered secret, token shape and long base64 run replaced by `***`."""
        if not text:
            return text
        with self._lock:
            fitting = self._values[: bisect.bisect_right(self._lengths, len(text))]
        for value in reversed(fitting):  # longest first, so a secret is blanked whole, not around a part
            if value in text:
                text = text.replace(value, REDACTED)
        return TOKEN_SHAPES.sub(REDACTED, text)


registry = SecretRegistry()
register = registry.register
register_encoded = registry.register_encoded
redact = registry.redact
