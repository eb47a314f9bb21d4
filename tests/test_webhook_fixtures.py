"""The vendored copy of GitHub's webhook schemas is complete: every reference resolves, every example fits.

Only the `$ref` closure of the workflow_job schemas is vendored; a reference to a `common/` schema that was left
out would only show up when a payload happens to carry that property, so it is checked here for all of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from referencing.exceptions import Unresolvable

from tests.sandbox.github_support import validate_workflow_job, webhook_schema_registry
from tests.webhook_fixtures import WEBHOOK_EXAMPLES, WEBHOOK_FIXTURES, WEBHOOK_SCHEMAS

SCHEMA_FILES = sorted(WEBHOOK_SCHEMAS.glob("*/*.schema.json"))
WORKFLOW_JOB_EXAMPLES = sorted(WEBHOOK_EXAMPLES.glob("workflow_job.*.payload.json"))


def references(node: Any) -> Iterator[str]:
    """Every `$ref` in a schema document, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from references(value)
    elif isinstance(node, list):
        for value in node:
            yield from references(value)


def test_the_fixtures_are_in_the_repository_with_their_licence() -> None:
    assert len(SCHEMA_FILES) >= 4 and len(WORKFLOW_JOB_EXAMPLES) >= 4
    assert {path.stem.split(".")[0] for path in WEBHOOK_EXAMPLES.glob("*.json")} == {"ping", "workflow_job"}
    assert "MIT License" in (WEBHOOK_FIXTURES / "LICENSE").read_text()
    assert "octokit/webhooks" in (WEBHOOK_FIXTURES / "README.md").read_text()


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_schema_reference_resolves_in_the_vendored_copy(path: Path) -> None:
    document = json.loads(path.read_text())
    resolver = webhook_schema_registry().resolver(base_uri=document["$id"])
    unresolved = []
    for reference in sorted(set(references(document))):
        try:
            resolver.lookup(reference)
        except Unresolvable:
            unresolved.append(reference)
    assert not unresolved, f"{path.name} refers to schemas that were not vendored: {unresolved}"


@pytest.mark.parametrize("path", WORKFLOW_JOB_EXAMPLES, ids=lambda path: path.name)
def test_every_workflow_job_example_matches_its_published_schema(path: Path) -> None:
    validate_workflow_job(json.loads(path.read_text()))
