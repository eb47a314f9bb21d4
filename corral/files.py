"""Files corral writes that may hold secrets: readable and writable by their owner only (0600).

A config holds the GitHub token and the webhook secret, the sandbox writes a private key and a cloud
password, and the SQLite database holds token hashes and every job: none of them is anyone else's
business on a shared host, whatever the umask of whoever started corral.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_MODE = 0o600


def write_private(path: Path, data: str | bytes) -> None:
    """Write `data` to `path`, which ends up 0600 even if it existed before with a wider mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_MODE)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), PRIVATE_MODE)
        file.write(data.encode() if isinstance(data, str) else data)


def create_private(path: Path) -> None:
    """Create `path` empty and 0600 unless it exists; an existing file keeps the mode its owner gave it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_MODE)
    except FileExistsError:
        return
    os.close(fd)
