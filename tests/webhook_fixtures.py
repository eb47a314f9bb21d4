"""GitHub's published webhook schemas and example payloads, vendored in `tests/fixtures/github-webhooks`.

They are the reference the sandbox's webhooks are checked against, so they live in the repository: a fresh
clone runs its tests with nothing beside it. Where they come from: `tests/fixtures/github-webhooks/README.md`.
"""

from __future__ import annotations

from pathlib import Path

WEBHOOK_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "github-webhooks"
WEBHOOK_EXAMPLES = WEBHOOK_FIXTURES / "examples"
WEBHOOK_SCHEMAS = WEBHOOK_FIXTURES / "schemas"
