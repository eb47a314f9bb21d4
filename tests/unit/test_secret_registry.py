"""`corral.secrets`: the registry of what is blanked from logs stays bounded and exact as JIT configs come and go."""

from __future__ import annotations

import base64

from corral import secrets


def jit_config(n: int) -> str:
    return base64.b64encode(f"config {n:04d} ".encode() * 40).decode()


def test_a_registry_holds_the_last_jit_configs_and_their_base64_forms_and_no_more() -> None:
    """Every JIT config is held with its three base64 forms; past `MAX_JIT_CONFIGS` the oldest go, all four
    strings, so a corral serving jobs for months holds exactly as many as after its first 512."""
    registry = secrets.SecretRegistry()
    registry.register("a-webhook-secret-to-hide")
    for n in range(secrets.MAX_JIT_CONFIGS):
        registry.register_encoded(jit_config(n))
    full = len(registry)
    assert full == 1 + secrets.MAX_JIT_CONFIGS * 4
    for n in range(secrets.MAX_JIT_CONFIGS, secrets.MAX_JIT_CONFIGS + 300):
        registry.register_encoded(jit_config(n))
    assert len(registry) == full
    oldest_kept, forgotten = jit_config(300), jit_config(299)
    assert registry.redact(f"x{oldest_kept}y") == "x***y"
    # The forgotten one is no longer an exact match, but still blanked whole by the long-base64 rule.
    assert registry.redact(f"[{forgotten}]") == "[***]"
    assert registry.redact("a-webhook-secret-to-hide!") == "***!"


def test_the_same_secret_registered_twice_is_held_once_and_forgotten_with_its_config() -> None:
    registry = secrets.SecretRegistry()
    registry.register("password-of-the-cloud")
    registry.register("password-of-the-cloud")
    assert len(registry) == 1
    registry.register_encoded(jit_config(1))
    registry.register_encoded(jit_config(1))  # a retried answer: the same config twice
    assert len(registry) == 1 + 4
