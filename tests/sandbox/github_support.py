"""Shared helpers for the GitHub-side sandbox tests: clients, JIT configs and webhook checks."""

from __future__ import annotations

import hashlib
import hmac
import json
from functools import cache
from pathlib import Path
from typing import Any

from githubkit import AppAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.cache import MemCacheStrategy
from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from corral_sandbox.server import Sandbox
from tests.webhook_fixtures import WEBHOOK_SCHEMAS
from tests.webhook_receiver import ReceivedDelivery

SCHEMAS = WEBHOOK_SCHEMAS


def pat_client(sandbox: Sandbox, *, enterprise: bool = False) -> GitHub[TokenAuthStrategy]:
    base = sandbox.info.github_enterprise_url if enterprise else sandbox.info.github_url
    # No HTTP cache: githubkit's would ask again with the ETag, and a 304 counts nothing (as on GitHub), so a
    # test counting requests would count its cache instead (the 304 has its own test).
    return GitHub(TokenAuthStrategy(sandbox.info.pat), base_url=base + "/", auto_retry=False, http_cache=False)


def app_client(sandbox: Sandbox, *, enterprise: bool = False) -> GitHub[AppAuthStrategy]:
    base = sandbox.info.github_enterprise_url if enterprise else sandbox.info.github_url
    key = Path(sandbox.info.private_key_path).read_text()
    # A cache of its own: githubkit's shared default would hand a token from a reset world to the next test.
    return GitHub(
        AppAuthStrategy(sandbox.info.app_id, key),
        base_url=base + "/",
        auto_retry=False,
        cache_strategy=MemCacheStrategy(),
        http_cache=False,
    )


def installation_client(sandbox: Sandbox, org: str) -> GitHub[Any]:
    app = app_client(sandbox)
    installation_id = app.rest.apps.get_org_installation(org).parsed_data.id
    return app.with_auth(app.auth.as_installation(installation_id))


def jit_config(gh: GitHub[Any], org: str, name: str, labels: list[str]) -> tuple[int, str]:
    """Generate a JIT config at org scope; returns (runner id, encoded_jit_config)."""
    created = gh.rest.actions.generate_runner_jitconfig_for_org(
        org, data={"name": name, "runner_group_id": 1, "labels": labels}
    ).parsed_data
    return created.runner.id, created.encoded_jit_config


@cache
def webhook_schema_registry() -> Registry:
    """Every vendored schema by its `$id`, so the workflow_job schemas' `common/...` references resolve offline."""
    resources = []
    for path in [*SCHEMAS.glob("common/*.json"), *SCHEMAS.glob("workflow_job/*.json")]:
        document = json.loads(path.read_text())
        resources.append((document["$id"], Resource.from_contents(document, default_specification=DRAFT7)))
    return Registry().with_resources(resources)


def validate_workflow_job(payload: dict[str, Any]) -> None:
    """Validate against GitHub's published schema for the payload's action (raises if invalid)."""
    schema = json.loads((SCHEMAS / "workflow_job" / f"{payload['action']}.schema.json").read_text())
    registry = webhook_schema_registry()
    Draft7Validator(schema, registry=registry, format_checker=Draft7Validator.FORMAT_CHECKER).validate(payload)


def signature_ok(delivery: ReceivedDelivery, secret: str) -> bool:
    """Check both signatures the way GitHub documents: HMAC of the raw body, constant-time compare."""
    key = secret.encode()
    sha256 = "sha256=" + hmac.new(key, delivery.body, hashlib.sha256).hexdigest()
    sha1 = "sha1=" + hmac.new(key, delivery.body, hashlib.sha1).hexdigest()
    return hmac.compare_digest(sha256, delivery.headers["X-Hub-Signature-256"]) and hmac.compare_digest(
        sha1, delivery.headers["X-Hub-Signature"]
    )


def events(deliveries: list[ReceivedDelivery], event: str) -> list[dict[str, Any]]:
    return [json.loads(d.body) for d in deliveries if d.headers.get("X-GitHub-Event") == event]
