"""Where the project's shared, read-only reference material lives: `../shared` beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path

SHARED = Path(os.environ.get("CORRAL_SHARED", Path(__file__).resolve().parents[2] / "shared"))
WEBHOOK_FIXTURES = SHARED / "fixtures" / "github-webhooks"
WEBHOOK_EXAMPLES = WEBHOOK_FIXTURES / "examples"
WEBHOOK_SCHEMAS = WEBHOOK_FIXTURES / "schemas"

if not WEBHOOK_EXAMPLES.is_dir():
    raise RuntimeError(f"GitHub's webhook fixtures are missing at {WEBHOOK_FIXTURES}; set CORRAL_SHARED")
