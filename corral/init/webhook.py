"""The webhook secret's file: the operator's (`--webhook-secret-file`), or one init generates beside the
config. Only the file's path is ever printed or written into the config, never the secret.

A generated secret is 32 random bytes in hex (what `openssl rand -hex 32` gives, as docs/configuration.md
advises). If the file init would generate already exists (a second run), it is kept: its secret may
already be pasted into the App's settings, and a new one would break every delivery until pasted again.
"""

from __future__ import annotations

import secrets as random
from dataclasses import dataclass
from pathlib import Path

from corral.files import write_private
from corral.init.errors import InitError

GENERATED_NAME = "webhook.secret"
SECRET_BYTES = 32


@dataclass(frozen=True)
class WebhookSecret:
    path: Path
    origin: str
    """Where it came from: `given`, `generated` now, or `kept` (a file an earlier run generated)."""


def webhook_secret(config_dir: Path, given: Path | None) -> WebhookSecret:
    if given is not None:
        if not given.is_file():
            raise InitError(f"--webhook-secret-file {str(given)!r}: no such file; give the file holding the secret")
        return WebhookSecret(given.resolve(), "given")
    path = config_dir / GENERATED_NAME
    if path.exists():
        return WebhookSecret(path, "kept")
    write_private(path, random.token_hex(SECRET_BYTES) + "\n")
    return WebhookSecret(path, "generated")
