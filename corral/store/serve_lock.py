"""One serving corral per SQLite file, said loudly.

SQLite has one writer and no leases: two `corral serve` processes on one file would both scale every pool for
the same demand. The first to start holds an exclusive `flock` on `<database>.serve-lock` for as long as it
runs; the kernel drops the lock when the process ends, however it ends (kill -9 included), so a crash never
leaves a stale lock behind. Short-lived commands (`corral token`, `corral migrate`) do not take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from corral.store.database import is_sqlite, sqlite_file


class AnotherCorralServing(RuntimeError):
    """A second `corral serve` on a SQLite file already served by another process."""


class ServeLock:
    """The exclusive claim of one process on a SQLite database file (nothing to claim for PostgreSQL, whose
    replicas coordinate in the database, or for an in-memory SQLite database, which is one process's alone)."""

    def __init__(self, database_url: str) -> None:
        self.database = sqlite_file(database_url) if is_sqlite(database_url) else None
        self._fd: int | None = None

    def acquire(self) -> None:
        if self.database is None:
            return
        path = self.database.with_name(self.database.name + ".serve-lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise AnotherCorralServing(
                f"another corral (pid {holder}) is already serving from {self.database}: SQLite serves one "
                "corral at a time. Stop that one first; to run several replicas, give each of them the same "
                "PostgreSQL database_url (postgresql+psycopg://...)."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
